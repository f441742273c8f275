#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages, the Rust wasm target, and the
# default model. Safe to run again: each step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in mesa-vulkan-drivers libvulkan1 unzip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs) and rerun" >&2
  exit 1
fi
rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown

scripts/fetch_model.sh
