#!/usr/bin/env python3
"""Writes crate/tests/fixtures/chat_goldens.json: chat templates rendered by Python's jinja2 with
transformers' apply_chat_template settings (trim_blocks, lstrip_blocks, loop controls,
raise_exception), for a set of conversations: Qwen2's (from llama.cpp's ggml-vocab-qwen2.gguf),
Gemma's, Qwen3's and Llama 3.2's (from llama.cpp's models/templates/), all fetched by
scripts/fetch_vocabs.sh.
A template that refuses a conversation (Gemma's on a system message) records its message. A
template that presents tools itself (Qwen3's, Llama 3.2's) also renders conversations with tools, calls and
results, given as transformers gives them: `tools` as OpenAI's objects, a call's arguments as an
object, transformers' `tojson` filter.

Usage: python3 scripts/make_chat_goldens.py     (needs jinja2 and gguf, llama.cpp's reader)
"""
import json
import pathlib

import gguf
import jinja2
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
TOOLS = [
    {"type": "function", "function": {
        "name": "convert_units", "description": "Convert a quantity (°C, km, kg) from one unit to another; value <= 1e6.",
        "parameters": {"type": "object", "properties": {
            "value": {"type": "number"},
            "from_unit": {"type": "string", "enum": ["km", "mi", "C", "F"]},
            "to_unit": {"type": "string", "enum": ["km", "mi", "C", "F"]}},
            "required": ["value", "from_unit", "to_unit"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The current time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]


def call(id, name, arguments):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


TOOL_CONVERSATIONS = [
    [{"role": "user", "content": "Convert 10 km to miles."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Time in Tokyo?"}],
    [{"role": "user", "content": "Convert 10 km to miles."},
     {"role": "assistant", "content": "", "tool_calls": [call("call_0", "convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"})]},
     {"role": "tool", "content": "6.2137", "tool_call_id": "call_0"}],
    [{"role": "user", "content": "Time in Paris and in Lima?"},
     {"role": "assistant", "content": "", "tool_calls": [call("a", "get_time", {"city": "Paris"}), call("b", "get_time", {"city": "Lima"})]},
     {"role": "tool", "content": "14:05", "tool_call_id": "a"}, {"role": "tool", "content": "07:05", "tool_call_id": "b"},
     {"role": "assistant", "content": "Paris 14:05, Lima 07:05."}, {"role": "user", "content": "Thanks!"}],
]


# transformers' tojson (chat_template_utils): json.dumps, non-ASCII kept, nothing escaped for HTML.
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


# (name, template source, bos_token, eos_token)
TEMPLATES = [
    ("ggml-vocab-qwen2.gguf", None, "", "<|endoftext|>"),
    ("templates/google-gemma-2-2b-it.jinja", None, "<bos>", "<eos>"),
    ("templates/Qwen-Qwen3-0.6B.jinja", None, "", "<|im_end|>"),
    ("templates/meta-llama-Llama-3.2-3B-Instruct.jinja", None, "<|begin_of_text|>", "<|eot_id|>"),
]


def source(name):
    if name.endswith(".gguf"):
        field = gguf.GGUFReader(VOCAB / name).fields["tokenizer.chat_template"]
        return bytes(field.parts[field.data[0]]).decode()
    return (VOCAB / name).read_text()


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = tojson
    templates = []
    for name, _, bos, eos in TEMPLATES:
        text = source(name)
        compiled = env.from_string(text)
        conversations = [(None, m) for m in CONVERSATIONS]
        if "tools" in text:
            conversations += [(TOOLS, m) for m in TOOL_CONVERSATIONS]
        cases = []
        for tools, messages in conversations:
            for add_generation_prompt in (True, False):
                case = {"messages": messages, "add_generation_prompt": add_generation_prompt}
                if tools:
                    case["tools"] = tools
                try:
                    case["rendered"] = compiled.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)
                except jinja2.exceptions.TemplateError as e:
                    case["raises"] = str(e)
                cases.append(case)
        templates.append({"template_of": name, "bos_token": bos, "eos_token": eos, "cases": cases})
    OUT.write_text(json.dumps({"renderer": f"jinja2 {jinja2.__version__}", "templates": templates}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT} ({sum(len(t['cases']) for t in templates)} renderings of {len(templates)} templates)")


if __name__ == "__main__":
    main()
