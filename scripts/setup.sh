#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages (Mesa's Vulkan drivers, Node.js,
# Chromium for the browser tests, WebKitGTK's MiniBrowser, WebKitWebDriver and Xvfb for the
# WebKit smoke test), the Rust wasm target and std's sources, wasm-bindgen-cli at the exact version
# of Cargo.lock, the npm packages of pkg/ and playwright-tests/, and the default model. Safe to
# run again: each step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in mesa-vulkan-drivers libvulkan1 unzip chromium chromium-driver libwebkit2gtk-4.1-0 webkit2gtk-driver xvfb; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs) and rerun" >&2
  exit 1
fi
rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown
# std's sources: the threaded wasm build rebuilds std with atomics.
rustup component list --installed 2>/dev/null | grep -qx rust-src || rustup component add rust-src

# wasm-bindgen's CLI must match the wasm-bindgen crate exactly, or the glue it writes is refused.
wbg=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $wbg" ]; then
  echo "setup: installing wasm-bindgen-cli $wbg (a few minutes)"
  cargo install --quiet wasm-bindgen-cli --version "=$wbg"
fi

# npm packages, pinned by each lock file; browsers are not downloaded (Debian's chromium is used).
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
for dir in pkg web playwright-tests; do
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "setup: npm packages of $dir/"
    (cd "$dir" && npm ci --silent --no-audit --no-fund)
  fi
done

scripts/fetch_model.sh
scripts/fetch_vocabs.sh
scripts/fetch_gemma3.sh
