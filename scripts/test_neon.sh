#!/usr/bin/env bash
# The CPU backend's NEON kernels (aarch64), checked on an x86-64 machine under qemu-user: the
# kernel tests (every weight type against the reference, NEON beside the scalar twin), then the
# default model's greedy 32-token chat reply, which must equal the native build's token for token.
# Not part of scripts/test.sh (a cross toolchain and a second build of the crate take minutes);
# run it after changing crate/src/cpu/. Installs what it needs, idempotently.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
scripts/fetch_model.sh

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
echo "== CPU kernels on aarch64 (NEON)"
cargo test --quiet --release --target aarch64-unknown-linux-gnu --test cpu_kernels

echo "== the default model's greedy reply: aarch64 (NEON) against x86-64"
cargo build --quiet --release --bin radixlm
cargo build --quiet --release --target aarch64-unknown-linux-gnu --bin radixlm
args=(generate --backend cpu --no-spill --chat --prompt "Write a haiku about autumn leaves." --max-tokens 32 --json)
tokens() { python3 -c "import json, sys; print(json.load(sys.stdin)['tokens'])"; }
native=$(target/release/radixlm "${args[@]}" 2>/dev/null | tokens)
neon=$($CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER target/aarch64-unknown-linux-gnu/release/radixlm "${args[@]}" 2>/dev/null | tokens)
echo "x86-64:  $native"
echo "aarch64: $neon"
[ "$native" = "$neon" ] || { echo "test_neon: the replies differ" >&2; exit 1; }
echo "test_neon: equal"
