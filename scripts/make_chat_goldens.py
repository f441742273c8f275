#!/usr/bin/env python3
"""Writes crate/tests/fixtures/chat_goldens.json: Qwen2's chat template (from llama.cpp's
ggml-vocab-qwen2.gguf, fetched by scripts/fetch_vocabs.sh) rendered by Python's jinja2, as
Hugging Face's transformers renders chat templates, for a set of conversations.

Usage: python3 scripts/make_chat_goldens.py     (needs `pip install gguf==0.19.0 jinja2`)
"""
import json
import pathlib

import jinja2
from gguf import GGUFReader

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "crate" / "tests" / "fixtures" / "chat_goldens.json"
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Sky colour?"}],
    [{"role": "user", "content": "Hi! I'm Ada."}, {"role": "assistant", "content": "Hello Ada!"},
     {"role": "user", "content": "What is my name?\n\nAnswer in 中文 🙂"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaces  "}],
]


def field_str(reader, key):
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    reader = GGUFReader(ROOT / "models" / "vocab" / "ggml-vocab-qwen2.gguf")
    template = field_str(reader, "tokenizer.chat_template")
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    cases = []
    for messages in CONVERSATIONS:
        for add_generation_prompt in (True, False):
            rendered = env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)
            cases.append({"messages": messages, "add_generation_prompt": add_generation_prompt, "rendered": rendered})
    OUT.write_text(json.dumps({"template_of": "ggml-vocab-qwen2.gguf", "renderer": f"jinja2 {jinja2.__version__}", "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT} ({len(cases)} renderings)")


if __name__ == "__main__":
    main()
