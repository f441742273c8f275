#!/usr/bin/env bash
# Sets up (idempotently), builds the wasm engine and the npm package, fetches the default model,
# and serves the chat app (web/) on 127.0.0.1 (port 8731, or $RADIXLM_PORT), printing its address.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build_web.sh
port="${RADIXLM_PORT:-8731}"
echo "radixlm: open http://127.0.0.1:$port/ in a browser with WebGPU (Ctrl-C stops)"
exec node scripts/serve.mjs --port "$port"
