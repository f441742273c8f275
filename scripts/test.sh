#!/usr/bin/env bash
# Sets up a fresh machine (idempotently) and runs every test: native tests on the Vulkan
# device (Mesa's llvmpipe where there is no GPU) and a wasm32 build check of the library.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# Mesa's Vulkan loader warns on every device open without a runtime directory.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

echo "== wasm32 build check"
cargo check --quiet --target wasm32-unknown-unknown -p radixlm --lib

echo "== native tests"
cargo test --workspace --no-fail-fast -- --show-output
