#!/usr/bin/env python3
"""Writes crate/tests/fixtures/models/: four small synthetic models written by radixlm's own
writer (`synth --preset tiny-256 --untied`: 256 wide, one layer), a llama with Llama 3.x's RoPE
factors (`--llama3-rope`), a qwen2 (`--qwen2`: biases, NEOX RoPE), a qwen3 (`--qwen3`: per-head
q and k norms, NEOX RoPE, 4 heads of 128 over the 256-wide model) and a gemma3 (`--gemma3 16`:
qwen3's attention, six layers of which five see 16 positions, post norms, GELU), each
quantized by llama.cpp's own quantizer to the format mixes users download, and goldens.json:
on each file, llama.cpp's logits after a prompt and its 32 greedy tokens (with each step's top
two logits, for the near-tie rule); and llama.cpp's logits on its own dequantization of the
file to F32 (`last_logits_f32`), which its CPU multiplies without rounding the activations to
8 bits: the exact check of our reading of the blocks.

Usage: python3 scripts/make_model_goldens.py
Needs `pip install llama-cpp-python==0.3.36` (llama.cpp built from source) and cargo.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import llama_cpp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_goldens import without_weight_repacking  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "crate" / "tests" / "fixtures" / "models"
N_CONTINUE = 32
PROMPT = "The lighthouse keeper wound the clockwork, trimmed the wick and wrote: fog, wind 7."
FTYPES = {
    "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q5_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "Q6_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K,
    "Q5_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_0,
    "Q5_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_1,
    "BF16": llama_cpp.LLAMA_FTYPE_MOSTLY_BF16,
    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}
MIXES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "BF16"]
# (architecture, synth flags, mixes)
ARCHS = [
    ("llama3", ["--llama3-rope", "--layers", "1"], MIXES),
    ("qwen2", ["--qwen2", "--layers", "1"], MIXES),
    ("qwen3", ["--qwen3", "--layers", "1"], MIXES + ["Q8_0", "Q4_0"]),
    ("gemma3", ["--gemma3", "16", "--layers", "6"], ["Q4_K_M", "Q8_0", "Q4_0"]),
]


def quantize(src, dst, ftype):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = ftype == llama_cpp.LLAMA_FTYPE_ALL_F32
    params.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not quantize {src} to {dst}")


def load(path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                          verbose=False, flash_attn=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)


def last_logits(llm):
    llm.reset()
    prompt = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
    llm.eval(prompt)
    return [round(float(v), 5) for v in llm.scores[llm.n_tokens - 1]]


def goldens(path, dequantized):
    llm = load(path)
    prompt = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
    llm.eval(prompt)
    logits = [round(float(v), 5) for v in llm.scores[llm.n_tokens - 1]]
    # Greedy like radixlm's ignore_eos: end-of-sequence ids are never chosen.
    banned = {llm.token_eos()} | {i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, i)}
    out, top = [], []
    for _ in range(N_CONTINUE):
        scores = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        scores[list(banned)] = -np.inf
        order = np.argsort(-scores, kind="stable")[:2]
        out.append(int(order[0]))
        top.append([[int(t), round(float(scores[t]), 4)] for t in order])
        llm.eval([int(order[0])])
    return {"prompt_ids": [int(t) for t in prompt], "last_logits": logits, "last_logits_f32": last_logits(load(dequantized)),
            "greedy_ids": out, "greedy_top2": top}


def main():
    without_weight_repacking()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for arch, flags, mixes in ARCHS:
            base = pathlib.Path(tmp) / f"{arch}.f32.gguf"
            subprocess.run(["cargo", "run", "--quiet", "--bin", "radixlm", "--", "synth", "--preset", "tiny-256",
                            "--untied", *flags, "--type", "f32", "--out", str(base)], cwd=ROOT, check=True)
            for name in mixes:
                ftype = FTYPES[name]
                dst = OUT / f"{arch}-tiny.{name}.gguf"
                quantize(base, dst, ftype)
                dequantized = pathlib.Path(tmp) / f"{arch}.{name}.f32.gguf"
                quantize(dst, dequantized, llama_cpp.LLAMA_FTYPE_ALL_F32)
                case = {"file": dst.name, "arch": arch, "ftype": name, **goldens(dst, dequantized)}
                print(f"{dst.name}: {dst.stat().st_size} bytes, greedy {case['greedy_ids'][:8]}...", file=sys.stderr)
                cases.append(case)
    (OUT / "goldens.json").write_text(json.dumps({
        "generator": f"llama-cpp-python {llama_cpp.__version__}, f32 KV cache, no flash attention",
        "prompt": PROMPT, "n_continue": N_CONTINUE, "cases": cases}) + "\n")


if __name__ == "__main__":
    main()
