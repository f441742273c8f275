#!/usr/bin/env python3
"""Writes crate/tests/fixtures/block_goldens.json: seeded random blocks of each ggml block format
and their weights as dequantized by the `gguf` package (gguf-py, llama.cpp's own Python reader,
whose numpy dequantizers follow ggml-quants.c), so our CPU dequantization is checked against an
implementation that is not ours.

Usage: python3 scripts/make_block_goldens.py        (needs `pip install gguf==0.19.0`)

Blocks are random bytes, except that every f16 scale or minimum is a random finite value of a
weight-like size (random bytes would make NaN and infinite scales, which no quantizer writes).
"""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "crate" / "tests" / "fixtures" / "block_goldens.json"
BLOCKS = 3

# Byte offsets of each format's f16 fields within a block (ggml-common.h).
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}


def random_blocks(rng, ty):
    block_len, block_bytes = GGML_QUANT_SIZES[ty]
    if ty == T.BF16:
        values = (rng.standard_normal(BLOCKS * 32) * 3).astype(np.float32)
        return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    data = bytearray(rng.integers(0, 256, BLOCKS * block_bytes, dtype=np.uint8).tobytes())
    for b in range(BLOCKS):
        for off in F16_FIELDS[ty]:
            scale = np.float16(rng.uniform(-0.05, 0.05) if off != 208 else rng.uniform(1e-4, 4e-3))
            at = b * block_bytes + off
            data[at:at + 2] = scale.tobytes()
    return bytes(data)


def main():
    rng = np.random.default_rng(20261202)
    goldens = []
    for ty in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.BF16]:
        data = random_blocks(rng, ty)
        weights = dequantize(np.frombuffer(data, dtype=np.uint8), ty).astype(np.float32)
        goldens.append({
            "type": ty.name,
            "data": data.hex(),
            # f32 bit patterns: exact, and no float formatting in between.
            "weights": weights.view(np.uint32).tolist(),
        })
    OUT.write_text(json.dumps({"source": "gguf-py 0.19.0 gguf.quants.dequantize", "goldens": goldens}) + "\n")
    print(f"wrote {OUT} ({len(goldens)} types)")


if __name__ == "__main__":
    main()
