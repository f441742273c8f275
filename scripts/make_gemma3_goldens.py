#!/usr/bin/env python3
"""Writes crate/tests/fixtures/gemma3_goldens.json: on Gemma 3 270M (Q4_K_M), llama.cpp's
prompt ids and 32 greedy tokens for a set of completion prompts (one over 1,000 tokens), and the
exact reference's verdict at every step: llama.cpp on its own F32 dequantization of the file
(which multiplies without rounding activations to 8 bits), fed the same tokens, gives its top
two at each step. Where radixlm's greedy token parts from llama.cpp's, the test asks the exact
reference which of the two is right. Also the F32 run's last-token logits of two prompts (the
64 largest and every 512th id), for the logit bound.

Usage: python3 scripts/make_gemma3_goldens.py [models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf]
Needs `pip install llama-cpp-python==0.3.36` (llama.cpp built from source); writes a 1 GB
F32 file to a temporary folder.
"""
import json
import os
import pathlib
import sys
import tempfile

import llama_cpp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_goldens import LONG_DOCUMENT, without_weight_repacking  # noqa: E402
from make_model_goldens import quantize  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "models" / "gemma-3-270m" / "gemma-3-270m-q4_k_m.gguf"
OUT = ROOT / "crate" / "tests" / "fixtures" / "gemma3_goldens.json"
N_CONTINUE = 32
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived",
    "1, 2, 3, 4, 5,",
    "Les plus beaux jardins de Paris sont",
    "東京は日本の首都で、",
    "Recipe: pancakes 🥞\n\nIngredients:\n-",
    "<start_of_turn>user\nWhat is the boiling point of water?<end_of_turn>\n<start_of_turn>model\n",
    "    indented   text\twith tabs\n\n\nand blank lines:",
    # Over 1,000 tokens, and over twice the 512-position window of the local layers.
    LONG_DOCUMENT + "\n\n" + LONG_DOCUMENT.replace("Summarise the passage above in three sentences.", "In short,"),
]
LOGIT_PROMPTS = [0, 2]


def load(path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_threads=os.cpu_count(), logits_all=True,
                           verbose=False, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)


def banned_ids(llm):
    """End-of-generation ids, never chosen (radixlm's greedy over a base model's 32 tokens)."""
    return sorted({llm.token_eos()} | {i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, i)})


def top2(scores, banned):
    scores = np.array(scores, dtype=np.float64)
    scores[banned] = -np.inf
    order = np.argsort(-scores, kind="stable")[:2]
    return [[int(t), round(float(scores[t]), 4)] for t in order]


def logit_sample(scores):
    scores = np.array(scores, dtype=np.float64)
    ids = sorted(set(np.argsort(-scores)[:64].tolist()) | set(range(0, len(scores), 512)))
    return [[int(i), round(float(scores[i]), 5)] for i in ids]


def main():
    without_weight_repacking()
    quantized = load(MODEL)
    banned = banned_ids(quantized)
    cases = []
    for i, text in enumerate(PROMPTS):
        prompt = quantized.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        quantized.reset()
        quantized.eval(prompt)
        out, top = [], []
        for _ in range(N_CONTINUE):
            pair = top2(quantized.scores[quantized.n_tokens - 1], banned)
            out.append(pair[0][0])
            top.append(pair)
            quantized.eval([pair[0][0]])
        cases.append({"name": f"gemma3-{i}", "text": text, "prompt_ids": [int(t) for t in prompt], "greedy_ids": out, "greedy_top2": top})
        print(f"gemma3-{i}: {len(prompt)} prompt tokens -> {quantized.detokenize(out).decode('utf-8', errors='replace')!r}", file=sys.stderr)
    del quantized
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = pathlib.Path(tmp) / "gemma3.f32.gguf"
        quantize(MODEL, f32_path, llama_cpp.LLAMA_FTYPE_ALL_F32)
        exact = load(f32_path)
        for case in cases:
            # The same tokens: the exact reference's top two at each of llama.cpp's greedy steps.
            exact.reset()
            exact.eval(case["prompt_ids"] + case["greedy_ids"][:-1])
            first = len(case["prompt_ids"]) - 1
            case["exact_top2"] = [top2(exact.scores[first + s], banned) for s in range(N_CONTINUE)]
            agree = sum(a[0][0] == b[0][0] for a, b in zip(case["greedy_top2"], case["exact_top2"]))
            print(f"{case['name']}: the exact reference agrees with llama.cpp at {agree}/{N_CONTINUE} steps", file=sys.stderr)
        for i in LOGIT_PROMPTS:
            exact.reset()
            exact.eval(cases[i]["prompt_ids"])
            cases[i]["exact_last_logits"] = logit_sample(exact.scores[exact.n_tokens - 1])
    OUT.write_text(json.dumps({
        "model": MODEL.name, "generator": f"llama-cpp-python {llama_cpp.__version__}, f32 KV cache, no flash attention; exact: its F32 dequantization",
        "n_continue": N_CONTINUE, "banned": banned, "cases": cases}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
