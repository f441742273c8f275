#!/usr/bin/env python3
"""Writes crate/tests/fixtures/chat_goldens.json: chat templates rendered by Python's jinja2 with
transformers' apply_chat_template settings (trim_blocks, lstrip_blocks, loop controls,
raise_exception), for a set of conversations: Qwen2's (from llama.cpp's ggml-vocab-qwen2.gguf),
Gemma's and Qwen3's (from llama.cpp's models/templates/), all fetched by scripts/fetch_vocabs.sh.
A template that refuses a conversation (Gemma's on a system message) records its message.

Usage: python3 scripts/make_chat_goldens.py     (needs llama-cpp-python==0.3.36 and jinja2)
"""
import json
import pathlib

import jinja2
import llama_cpp
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
VOCAB = ROOT / "models" / "vocab"
OUT = ROOT / "crate" / "tests" / "fixtures" / "chat_goldens.json"
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Sky colour?"}],
    [{"role": "user", "content": "Hi! I'm Ada."}, {"role": "assistant", "content": "Hello Ada!"},
     {"role": "user", "content": "What is my name?\n\nAnswer in 中文 🙂"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaces  "}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4"},
     {"role": "user", "content": "and 3+3?"}],
]
# (name, template source, bos_token, eos_token)
TEMPLATES = [
    ("ggml-vocab-qwen2.gguf", None, "", "<|endoftext|>"),
    ("templates/google-gemma-2-2b-it.jinja", None, "<bos>", "<eos>"),
    ("templates/Qwen-Qwen3-0.6B.jinja", None, "", "<|im_end|>"),
]


def source(name):
    if name.endswith(".gguf"):
        llm = llama_cpp.Llama(model_path=str(VOCAB / name), vocab_only=True, verbose=False)
        return llm.metadata["tokenizer.chat_template"]
    return (VOCAB / name).read_text()


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    templates = []
    for name, _, bos, eos in TEMPLATES:
        compiled = env.from_string(source(name))
        cases = []
        for messages in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                case = {"messages": messages, "add_generation_prompt": add_generation_prompt}
                try:
                    case["rendered"] = compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)
                except jinja2.exceptions.TemplateError as e:
                    case["raises"] = str(e)
                cases.append(case)
        templates.append({"template_of": name, "bos_token": bos, "eos_token": eos, "cases": cases})
    OUT.write_text(json.dumps({"renderer": f"jinja2 {jinja2.__version__}", "templates": templates}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT} ({sum(len(t['cases']) for t in templates)} renderings of {len(templates)} templates)")


if __name__ == "__main__":
    main()
