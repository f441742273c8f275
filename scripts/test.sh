#!/usr/bin/env bash
# Sets up a fresh machine (idempotently) and runs every test: the wasm and package builds, the
# TypeScript type checks, the native tests on the Vulkan device (Mesa's llvmpipe where there is
# no GPU), the browser tests in headless Chromium on WebGPU (SwiftShader where there is no GPU), and
# the browser prefix benchmark at its smoke size.
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
# Builds the CLI too (target/debug/radixlm, which the browser tests run), with the features the
# tests' dependencies unify: a separate `cargo build` of it would compile every crate twice.
cargo test --workspace --no-fail-fast -- --show-output

echo "== browser tests"
(cd playwright-tests && npx --no-install playwright test)

# The prefix benchmark at its smoke size (one prefix length, one repeat, radixlm beside wllama, every
# correctness control): it fails if a control fails. Its tables go to test-results/, not results/.
echo "== browser benchmark, smoke size"
(cd playwright-tests && RADIXLM_BENCH_SIZE=smoke RADIXLM_BENCH_BACKEND=cpu RADIXLM_BENCH_OUT=test-results/bench-smoke npx --no-install playwright test -c bench.config.ts prefix)
