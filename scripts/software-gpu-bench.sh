#!/usr/bin/env bash
# The GPU kernels (`--kernels gpu`: the shapes real GPUs get) on this machine's software GPUs,
# side by side with another build in one run: Mesa's llvmpipe and Chromium's SwiftShader Vulkan
# driver (Debian's chromium package ships it; the same driver Chromium's WebGPU runs on here).
# Runs of the two builds alternate, so a noisy host moves both alike.
#
#   scripts/software-gpu-bench.sh <baseline-commit-or-binary>
#
# A commit is built in a scratch worktree (target/software-gpu-bench/<commit>); this checkout's
# CLI is built with cargo. PREFILL_TOKENS (128), DECODE_TOKENS (16), REPEATS (2) and ROUNDS (2:
# each build runs ROUNDS times per driver, alternating) size it; MODEL picks the GGUF (the
# default model). Prints decode and prefill tok/s per driver, build and round, then the medians'
# ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:?usage: scripts/software-gpu-bench.sh <baseline-commit-or-binary>}
PREFILL_TOKENS=${PREFILL_TOKENS:-128}
DECODE_TOKENS=${DECODE_TOKENS:-16}
REPEATS=${REPEATS:-2}
ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
swiftshader=/usr/lib/chromium/vk_swiftshader_icd.json
work=target/software-gpu-bench
mkdir -p "$work" "${XDG_RUNTIME_DIR:=/tmp/radixlm-xdg}"
export XDG_RUNTIME_DIR

[[ -e $MODEL ]] || { echo "no model at $MODEL: run scripts/fetch_model.sh" >&2; exit 1; }
[[ -e $swiftshader ]] || { echo "no SwiftShader Vulkan driver at $swiftshader: apt-get install chromium" >&2; exit 1; }

if [[ -x $base && ! -d $base ]]; then
    base_bin=$base
else
    commit=$(git rev-parse --short "$base^{commit}")
    tree=$work/$commit
    if [[ ! -e $tree/.git ]]; then
        git worktree add --detach "$tree" "$commit" >/dev/null
    fi
    (cd "$tree" && CARGO_TARGET_DIR="$PWD/../target-$commit" cargo build --release --bin radixlm)
    base_bin=$work/target-$commit/release/radixlm
fi
cargo build --release --bin radixlm
this_bin=target/release/radixlm

# One run's "decode prefill" tok/s (medians of REPEATS).
run() {
    local bin=$1 driver=$2 json
    local env=()
    [[ $driver == swiftshader ]] && env=(VK_ICD_FILENAMES=$swiftshader VK_DRIVER_FILES=$swiftshader)
    json=$(env "${env[@]}" "$bin" bench throughput --model "$MODEL" --backend gpu --kernels gpu --no-spill \
        --prefill-tokens "$PREFILL_TOKENS" --decode-tokens "$DECODE_TOKENS" --repeats "$REPEATS" 2>/dev/null | grep '^{')
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["device"].split(" on ")[0], "|", "%.2f %.2f" % (j["decode_tokens_per_s"], j["prefill_tokens_per_s"]))' "$json"
}

echo "baseline: $base_bin ($base); this build: $this_bin ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with changes'))"
echo "model $MODEL, --kernels gpu, $PREFILL_TOKENS-token prefill, $DECODE_TOKENS decoded tokens, medians of $REPEATS"
echo
echo "| driver | build | round | adapter | decode tok/s | prefill tok/s |"
echo "|---|---|---:|---|---:|---:|"
declare -A runs
for driver in llvmpipe swiftshader; do
    for round in $(seq "$ROUNDS"); do
        for build in baseline this; do
            bin=$base_bin
            [[ $build == this ]] && bin=$this_bin
            out=$(run "$bin" "$driver")
            adapter=${out% | *}
            read -r decode prefill <<<"${out#* | }"
            echo "| $driver | $build | $round | $adapter | $decode | $prefill |"
            runs[$driver.$build]+="$decode,$prefill "
        done
    done
done
echo
echo "| driver | decode: baseline → this | prefill: baseline → this |"
echo "|---|---:|---:|"
for driver in llvmpipe swiftshader; do
    python3 - "$driver" "${runs[$driver.baseline]}" "${runs[$driver.this]}" <<'EOF'
import statistics, sys
driver, base, this = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
med = lambda runs, i: statistics.median(float(r.split(",")[i]) for r in runs)
cell = lambda i: "%.2f → %.2f (%.2fx)" % (med(base, i), med(this, i), med(this, i) / med(base, i))
print(f"| {driver} | {cell(0)} | {cell(1)} |")
EOF
done
