#!/usr/bin/env bash
# Sets up a fresh machine (idempotently) and runs every test: the wasm and package builds, the
# TypeScript type checks, the native tests on the Vulkan device (Mesa's llvmpipe where there is
# no GPU), and the browser tests in headless Chromium on WebGPU (SwiftShader where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# Mesa's Vulkan loader warns on every device open without a runtime directory.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

echo "== wasm and package build"
scripts/build_web.sh

echo "== TypeScript type checks"
(cd pkg && npx --no-install tsc --noEmit -p .)
(cd web && npx --no-install tsc --noEmit -p .)
(cd playwright-tests && npx --no-install tsc --noEmit -p .)

echo "== native tests"
cargo build --quiet --bin radixlm
cargo test --workspace --no-fail-fast -- --show-output

echo "== browser tests"
(cd playwright-tests && npx --no-install playwright test)
