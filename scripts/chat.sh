#!/usr/bin/env bash
# Sets up (idempotently), builds, and starts a chat with the default model in the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --quiet --bin radixlm
exec target/debug/radixlm chat --model models/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
