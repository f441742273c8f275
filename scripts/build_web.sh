#!/usr/bin/env bash
# Builds the npm package in pkg/ (the engine for wasm32 on wgpu's WebGPU backend, its
# wasm-bindgen glue, wasm-opt, the TypeScript client and worker; output pkg/dist/), then the chat
# app in web/ on it (type-checked, bundled by Vite; output web/dist/).
# Idempotent: cargo and tsc rebuild only what changed. Needs scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "build: wasm32 engine"
cargo build --quiet --release --target wasm32-unknown-unknown -p radixlm --lib

out=pkg/dist/wasm
mkdir -p "$out"
wasm-bindgen --target web --out-dir "$out" --out-name radixlm \
  target/wasm32-unknown-unknown/release/radixlm.wasm
# The feature flags are what rustc's wasm32 target emits (SIMD from .cargo/config.toml, for the
# CPU backend's kernels); wasm-opt rejects them otherwise.
pkg/node_modules/.bin/wasm-opt -O3 \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-reference-types --enable-multivalue --enable-mutable-globals --enable-simd \
  "$out/radixlm_bg.wasm" -o "$out/radixlm_bg.wasm"

echo "build: TypeScript package"
(cd pkg && npx --no-install tsc -p .)
raw=$(stat -c %s "$out/radixlm_bg.wasm")
gz=$(gzip -9 -c "$out/radixlm_bg.wasm" | wc -c)
echo "build: pkg/dist ready (wasm $((raw / 1024)) KiB, $((gz / 1024)) KiB gzipped)"

echo "build: chat app"
(cd web && npx --no-install tsc --noEmit -p . && npx --no-install vite build --logLevel warn)
gz() { cat "$@" | gzip -9 | wc -c; }
app_js=$(gz web/dist/assets/index-*.js)
app_css=$(gz web/dist/assets/index-*.css)
worker_js=$(gz web/dist/assets/worker-*.js)
echo "build: web/dist ready (gzipped: app JS $((app_js / 1024)) KiB, CSS $((app_css / 1024)) KiB; engine worker JS $((worker_js / 1024)) KiB and wasm as above)"
