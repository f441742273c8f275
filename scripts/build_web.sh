#!/usr/bin/env bash
# Builds the npm package in pkg/ (the engine for wasm32, on WebGPU and on the CPU, single-threaded
# and threaded; their wasm-bindgen glue and wasm-opt; the TypeScript client and worker; output
# pkg/dist/), then the chat app in web/ on it (type-checked, bundled by Vite; output web/dist/).
# Idempotent: cargo and tsc rebuild only what changed. Needs scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."

# Two builds of the engine, one surface: wasm/ on one thread (any page), and wasm-threads/ whose
# CPU backend runs on Web Workers over a shared memory (cross-origin-isolated pages). The threaded
# one rebuilds std with atomics (rust-src, from scripts/setup.sh; RUSTC_BOOTSTRAP lets the stable
# toolchain take -Z build-std) and links a shared memory of up to 4 GiB, as wasm-bindgen needs.
# The feature flags given to wasm-opt are what rustc's wasm32 target emits (SIMD from
# .cargo/config.toml, for the CPU backend's kernels); wasm-opt rejects them otherwise.
opt_features=(--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-reference-types --enable-multivalue --enable-mutable-globals --enable-simd)
threads_rustflags="-C target-feature=+simd128,+atomics,+bulk-memory,+mutable-globals \
-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size \
-C link-arg=--export=__tls_align -C link-arg=--export=__tls_base"

# The glue's declarations, generated from the crate's Rust types (tsify, wasm-bindgen), go to
# pkg/src/ too: the package's TypeScript compiles against them, so a change of the contract on
# one side fails the build on the other.
bindgen() { # wasm file, output folder, extra wasm-opt flags
  local out=pkg/dist/$2
  mkdir -p "$out" "pkg/src/$2"
  wasm-bindgen --target web --out-dir "$out" --out-name radixlm "$1"
  cp "$out/radixlm.d.ts" "pkg/src/$2/radixlm.d.ts"
  pkg/node_modules/.bin/wasm-opt -O3 "${opt_features[@]}" ${3:-} "$out/radixlm_bg.wasm" -o "$out/radixlm_bg.wasm"
}

echo "build: wasm32 engine (one thread)"
cargo build --quiet --release --target wasm32-unknown-unknown -p radixlm --lib
bindgen target/wasm32-unknown-unknown/release/radixlm.wasm wasm

echo "build: wasm32 engine (threads)"
RUSTC_BOOTSTRAP=1 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$threads_rustflags" \
  cargo build --quiet --release --target wasm32-unknown-unknown -p radixlm --lib \
  -Z build-std=std,panic_abort --target-dir target/wasm-threads
bindgen target/wasm-threads/wasm32-unknown-unknown/release/radixlm.wasm wasm-threads --enable-threads

echo "build: TypeScript package"
(cd pkg && npx --no-install tsc -p .)
size() { echo "$(($(stat -c %s "$1") / 1024)) KiB, $(($(gzip -9 -c "$1" | wc -c) / 1024)) KiB gzipped"; }
echo "build: pkg/dist ready (wasm: one thread $(size pkg/dist/wasm/radixlm_bg.wasm); threads $(size pkg/dist/wasm-threads/radixlm_bg.wasm))"

echo "build: chat app"
(cd web && npx --no-install tsc --noEmit -p . && npx --no-install vite build --logLevel warn)
gz() { cat "$@" | gzip -9 | wc -c; }
app_js=$(gz web/dist/assets/index-*.js)
app_css=$(gz web/dist/assets/index-*.css)
worker_js=$(gz web/dist/assets/worker-*.js)
echo "build: web/dist ready (gzipped: app JS $((app_js / 1024)) KiB, CSS $((app_css / 1024)) KiB; engine worker JS $((worker_js / 1024)) KiB and wasm as above)"
