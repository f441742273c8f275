#!/usr/bin/env python3
"""Writes crate/tests/fixtures/vocab_goldens.json: llama.cpp's ids, special tokens parsed, for
strings mixing special tokens with text, on its vocab-only GGUFs of the Llama 3.x (llama-bpe),
Qwen2 and Llama 2 (llama-spm, SentencePiece) tokenizers (models/vocab/, fetched by scripts/fetch_vocabs.sh). llama.cpp's own test
strings (.inp/.out beside them) hold no special tokens.

Usage: python3 scripts/make_vocab_goldens.py     (needs `pip install llama-cpp-python==0.3.36`)
"""
import json
import pathlib

import llama_cpp

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "crate" / "tests" / "fixtures" / "vocab_goldens.json"
STRINGS = [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|endoftext|> x <|fim_prefix|>def f():<|fim_suffix|>",
    "text<|eot_id|><|eot_id|>  <|im_end|>tail",
    "<|im_start|><|im_start|>",
    "not <|special|> at all <|im_end",
]
# Llama 2's control tokens among text (the space prefix after each one too).
SPM_STRINGS = [
    "<s>[INST] hi [/INST] hello</s><s>[INST] again [/INST]",
    "</s> <unk>x<s>  <s",
]


def main():
    vocabs = {}
    for name, strings in [("llama-bpe", STRINGS), ("qwen2", STRINGS), ("llama-spm", STRINGS + SPM_STRINGS)]:
        llm = llama_cpp.Llama(model_path=str(ROOT / "models" / "vocab" / f"ggml-vocab-{name}.gguf"), vocab_only=True, verbose=False)
        vocabs[name] = [{"text": s, "ids": llm.tokenize(s.encode(), add_bos=False, special=True)} for s in strings]
    OUT.write_text(json.dumps({"generator": f"llama-cpp-python {llama_cpp.__version__}, special tokens parsed", "vocabs": vocabs}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
