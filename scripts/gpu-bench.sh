#!/usr/bin/env bash
# radixlm on a real GPU, natively through wgpu on Vulkan, in one command. Made for a Linux machine
# with an NVIDIA GPU (an H200) and nothing else installed; any Vulkan GPU will do.
#
#   scripts/gpu-bench.sh --fetch-loader   # once, on a machine with apt: Debian's Vulkan loader and
#                                         # the GL dispatch libraries NVIDIA's ICD links, into .gl/
#   scripts/gpu-bench.sh                  # on the GPU machine
#
# 1. Vulkan: the system's loader, else the one in .gl/ (unpacked into /); NVIDIA's ICD where the
#    driver is mounted under /usr/local/nvidia and the loader does not find it.
# 2. The CLI: built with cargo where there is one, else target/release/radixlm as carried there.
#    The GPU tests first: every kernel and the whole models against the CPU reference and
#    llama.cpp's goldens on this GPU (with cargo, or test binaries carried in target/gpu-tests/:
#    `cargo test --no-run --test kernels --test engine_synthetic --test llama_cpp_models`, the
#    executables copied there under those names). A failure stops the benchmark.
# 3. Synthetic GGUFs (random weights, real shapes) written on that machine, side by side:
#    SmolLM2-135M (Q4_1), Llama-3.2-1B and Llama-3.2-3B (Q4_0), with untied LM heads so that the
#    prefix benchmark's control (the question alone answers differently) can tell a lost prefix.
# 4. Copy bandwidth; per shape prefill tok/s at 512 and 4,096 tokens, decode tok/s, the --profile
#    breakdown, and `bench prefix` at P = 4,096, delta 32, its correctness controls included.
#    Decode is reported as a fraction of the bandwidth bound (weight bytes a token reads ÷ copy
#    bandwidth) and prefill as a fraction of fp32 peak (matrix-product FLOPs only;
#    RADIXLM_FP32_TFLOPS, 67 for an H100/H200 SXM).
#
# BASELINE=path/to/another/radixlm measures that build's prefill and decode beside this one's, in
# the same run (e.g. the commit before a kernel change).
#
# Tables go to stdout, JSON to $RADIXLM_GPU_BENCH_OUT (default target/gpu-bench/). A dry run on a
# CPU adapter (llvmpipe) needs RADIXLM_GPU_BENCH_CPU=1 and smaller sizes, e.g.
#   RADIXLM_GPU_BENCH_CPU=1 SHAPES=smollm2-135m PREFILL_LENS=64 DECODE_TOKENS=8 PREFIX_LEN=128 REPEATS=1 scripts/gpu-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SHAPES=${SHAPES:-smollm2-135m llama-3.2-1b llama-3.2-3b}
PREFILL_LENS=${PREFILL_LENS:-512 4096}
DECODE_TOKENS=${DECODE_TOKENS:-128}
PREFIX_LEN=${PREFIX_LEN:-4096}
REPEATS=${REPEATS:-3}
KV_MIB=${KV_MIB:-8192}
out=${RADIXLM_GPU_BENCH_OUT:-target/gpu-bench}

if [[ ${1:-} == --fetch-loader ]]; then
    mkdir -p .gl /tmp/radixlm-apt/partial
    o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/radixlm-apt)
    apt-get "${o[@]}" update -qq
    (cd .gl && apt-get "${o[@]}" download libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libgles2 libopengl0)
    ls -l .gl
    exit 0
fi

# 1. Vulkan.
if ! ldconfig -p | grep 'libvulkan\.so\.1' >/dev/null; then
    debs=(.gl/*.deb)
    [[ -e ${debs[0]} ]] || { echo "no Vulkan loader here and none in .gl/: run scripts/gpu-bench.sh --fetch-loader on a machine with apt and bring .gl/" >&2; exit 1; }
    for f in "${debs[@]}"; do dpkg -x "$f" /; done
    ldconfig
fi
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [[ -e $nvidia_icd ]] && ! grep -qs nvidia /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; then
    export VK_DRIVER_FILES=$nvidia_icd VK_ICD_FILENAMES=$nvidia_icd
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/radixlm-xdg}
mkdir -p "$XDG_RUNTIME_DIR" "$out"
rm -f "$out"/*.txt # a run's tables only

# 2. The CLI.
if command -v cargo >/dev/null; then
    cargo build --release --bin radixlm
fi
bin=target/release/radixlm
[[ -x $bin ]] || { echo "no $bin: build it (cargo build --release --bin radixlm) or bring it" >&2; exit 1; }

# The GPU tests: correctness on this GPU before any figure.
tests=(kernels "engine_synthetic gpu" "llama_cpp_models --skip on_the_cpu")
if [[ -z ${SKIP_TESTS:-} ]]; then
    if command -v cargo >/dev/null; then
        for t in "${tests[@]}"; do
            read -r name args <<<"$t"
            cargo test --release --test "$name" -- $args
        done
    elif [[ -d target/gpu-tests ]]; then
        # The binaries find their fixtures under the checkout they were built in.
        root=$(grep -aoE -m1 '/[^[:space:]"]*/crate/\.\./shaders-wgsl' target/gpu-tests/kernels | head -1 | sed 's#/crate/\.\./shaders-wgsl##' || true)
        if [[ -n $root && ! -e $root ]]; then mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; fi
        for t in "${tests[@]}"; do
            read -r name args <<<"$t"
            target/gpu-tests/$name $args
        done
    else
        echo "no cargo and no target/gpu-tests/: the GPU tests cannot run (SKIP_TESTS=1 benchmarks anyway)" >&2
        exit 1
    fi
fi

# Copy bandwidth, and a check that this is the GPU and not a software adapter.
"$bin" bench bandwidth | tee "$out/bandwidth.txt"
if grep -qiE 'llvmpipe|swiftshader' "$out/bandwidth.txt" && [[ -z ${RADIXLM_GPU_BENCH_CPU:-} ]]; then
    echo "wgpu chose a software adapter (above): no GPU driver found (RADIXLM_GPU_BENCH_CPU=1 runs anyway)" >&2
    exit 1
fi

models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
# The models are written side by side (one CPU thread each) while the first is measured.
declare -A writing
for shape in $SHAPES; do
    case $shape in
        smollm2-135m) type=q4_1 ;;
        *) type=q4_0 ;;
    esac
    "$bin" synth --preset "$shape" --type "$type" --untied --out "$models/$shape.gguf" &
    writing[$shape]=$!
done
for shape in $SHAPES; do
    model=$models/$shape.gguf
    wait "${writing[$shape]}"
    "$bin" info "$model" | grep -E '^(layers|embedding|heads|vocab|tensors|  |per token)' | tee "$out/$shape-info.txt"
    first=1
    for n in $PREFILL_LENS; do
        echo "== $shape: prefill $n, decode $DECODE_TOKENS $(date +%T)"
        profile=()
        [[ $first == 1 ]] && profile=(--profile)
        "$bin" bench throughput --backend gpu --model "$model" --kv-mib "$KV_MIB" --prefill-tokens "$n" --decode-tokens "$DECODE_TOKENS" --repeats "$REPEATS" "${profile[@]}" | tee "$out/$shape-throughput-$n.txt"
        if [[ $first == 1 && -n ${BASELINE:-} ]]; then
            "$BASELINE" bench throughput --backend gpu --model "$model" --kv-mib "$KV_MIB" --prefill-tokens "$n" --decode-tokens "$DECODE_TOKENS" --repeats "$REPEATS" | tee "$out/$shape-baseline-$n.txt"
        fi
        first=0
    done
    echo "== $shape: bench prefix at $PREFIX_LEN, delta 32 $(date +%T)"
    "$bin" bench prefix --backend gpu --model "$model" --kv-mib "$KV_MIB" --prefix-lens "$PREFIX_LEN" --delta 32 --repeats "$REPEATS" | tee "$out/$shape-prefix.txt"
done

# 4. Against the hardware: every figure above, read back from the JSON lines.
python3 - "$out" $SHAPES <<'EOF'
import json, os, re, sys
out, shapes = sys.argv[1], sys.argv[2:]
def json_lines(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
bw = json_lines(os.path.join(out, "bandwidth.txt"))[0]
device = bw["device"]
peak = float(os.environ.get("RADIXLM_FP32_TFLOPS") or (67 if re.search(r"H100|H200", device) else 0))
print(f"\n## {device}: copy bandwidth {bw['copy_gb_per_s']:.0f} GB/s; fp32 peak {peak or 'unknown (set RADIXLM_FP32_TFLOPS)'} TFLOP/s")
print("| shape | weight MB read / token | prefill tokens | prefill tok/s | % of fp32 peak | decode tok/s | bandwidth bound tok/s | % of bound | warm / cold at P | controls |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
baselines = []
for shape in shapes:
    info = open(os.path.join(out, f"{shape}-info.txt")).read()
    read, flops = map(int, re.search(r"per token:\s+(\d+) weight bytes read \(decode\), (\d+) matmul FLOPs", info).groups())
    bound = bw["copy_gb_per_s"] * 1e9 / read
    prefix = json_lines(os.path.join(out, f"{shape}-prefix.txt"))[-1]["rows"][0]
    controls = "pass" if prefix["failed_control"] is None else f"FAIL: {prefix['failed_control']}"
    for name in sorted(f for f in os.listdir(out) if f.startswith(f"{shape}-throughput-")):
        t = json_lines(os.path.join(out, name))[0]
        base = os.path.join(out, name.replace("-throughput-", "-baseline-"))
        if os.path.exists(base):
            b = json_lines(base)[0]
            baselines.append(f"| {shape} | {t['prefill_tokens']} | {b['prefill_tokens_per_s']:.0f} | {t['prefill_tokens_per_s']:.0f} | {b['decode_tokens_per_s']:.1f} | {t['decode_tokens_per_s']:.1f} ({t['decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}x) |")
        pf = f"{t['prefill_tokens_per_s'] * flops / 1e12 / peak * 100:.1f} %" if peak else "n/a"
        print(f"| {shape} | {read / 1e6:.0f} | {t['prefill_tokens']} | {t['prefill_tokens_per_s']:.0f} | {pf} | {t['decode_tokens_per_s']:.0f} | {bound:.0f} | {t['decode_tokens_per_s'] / bound * 100:.0f} % | {prefix['speedup']:.0f}x at {prefix['prefix_len']} | {controls} |")
if baselines:
    print("\nBeside the baseline build (BASELINE), same run:")
    print("| shape | prefill tokens | baseline prefill tok/s | prefill tok/s | baseline decode tok/s | decode tok/s |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(baselines))
EOF
