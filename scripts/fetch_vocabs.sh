#!/usr/bin/env bash
# Fetches llama.cpp's vocab-only GGUFs for the llama-bpe (Llama 3.x) and qwen2 pre-tokenizers and
# for the llama-spm (Llama 2 SentencePiece) vocabulary,
# with their test strings (.inp) and llama.cpp's token ids for them (.out), and three chat
# templates from llama.cpp's collection (Gemma's, Qwen3's and Llama 3.2's), into models/vocab/.
# They ship inside the llama-cpp-python 0.3.36 source distribution on PyPI (MIT, llama.cpp's
# LICENSE is copied beside them); the archive and every file are checked against sha256.
# Nothing is downloaded when the verified files are already present.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=models/vocab
SDIST=llama_cpp_python-0.3.36.tar.gz
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
FILES="97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e  ggml-vocab-llama-bpe.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-llama-bpe.gguf.inp
118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b  ggml-vocab-llama-bpe.gguf.out
44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c  ggml-vocab-qwen2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-qwen2.gguf.inp
de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363  ggml-vocab-qwen2.gguf.out
16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69  ggml-vocab-llama-spm.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-llama-spm.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29  ggml-vocab-llama-spm.gguf.out
ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6  templates/google-gemma-2-2b-it.jinja
87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5  templates/Qwen-Qwen3-0.6B.jinja
5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4  templates/meta-llama-Llama-3.2-3B-Instruct.jinja"

verified() { (cd "$1" && echo "$FILES" | sha256sum --check --status) 2>/dev/null && [ -f "$1/LICENSE" ]; }

if verified "$DEST"; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_vocabs: downloading $SDIST (77 MB) from PyPI for llama.cpp's vocab test files"
# The source distribution's address from the package index pip uses (its simple API).
python3 - "$tmp/$SDIST" <<'PY'
import os, re, sys, urllib.request
index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
page = urllib.request.urlopen(f"{index}/llama-cpp-python/", timeout=120).read().decode()
match = re.search(r'href="([^"#]*llama_cpp_python-0\.3\.36\.tar\.gz)[^"]*"', page)
if not match:
    sys.exit("fetch_vocabs: llama-cpp-python 0.3.36's source distribution is not on the index")
url = urllib.parse.urljoin(f"{index}/llama-cpp-python/", match.group(1))
with urllib.request.urlopen(url, timeout=600) as r, open(sys.argv[1], "wb") as f:
    while chunk := r.read(1 << 20):
        f.write(chunk)
PY
if ! echo "$SDIST_SHA256  $tmp/$SDIST" | sha256sum --check --status; then
  echo "fetch_vocabs: $SDIST failed its sha256 check (expected $SDIST_SHA256)" >&2
  exit 1
fi
members=$(echo "$FILES" | awk '{print "llama_cpp_python-0.3.36/vendor/llama.cpp/models/" $2}')
tar xzf "$tmp/$SDIST" -C "$tmp" llama_cpp_python-0.3.36/vendor/llama.cpp/LICENSE $members
mkdir -p "$tmp/out"
cp -r "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/* "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp/LICENSE "$tmp/out/"
if ! verified "$tmp/out"; then
  echo "fetch_vocabs: the vocab files failed their sha256 check; not installed" >&2
  exit 1
fi
rm -rf "$DEST"
mkdir -p models
mv "$tmp/out" "$DEST"
echo "fetch_vocabs: $DEST ready"
