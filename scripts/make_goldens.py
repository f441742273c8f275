#!/usr/bin/env python3
"""Writes crate/tests/fixtures/goldens.json: llama.cpp's token ids and greedy continuations
for a set of raw and chat-templated prompts on the default model.

Usage: python3 scripts/make_goldens.py [models/SmolLM2-135M-Instruct.Q4_1.gguf]
Needs `pip install llama-cpp-python==0.3.36 jinja2` (llama.cpp built from source).
"""
import json
import os
import sys

import jinja2
import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "crate", "tests", "fixtures", "goldens.json")
N_CONTINUE = 32

LONG_DOCUMENT = """The history of the lighthouse is a history of coastlines, trade and the slow work of making the sea less dangerous. The earliest known lighthouse, the Pharos of Alexandria, was built in the third century before the common era on a small island at the entrance to the harbour. It stood for more than a thousand years, guiding grain ships that carried wheat from the Nile delta to Rome, until a series of earthquakes brought it down. Its name survives in many languages as the word for a lighthouse.

For centuries afterwards most lights were simple fires burning on towers or hills. Keepers fed them with wood, coal or oil, and the light they gave was weak and unsteady. Sailors could not always tell one light from another, so a ship that saw a fire on the shore might mistake its position by many miles. Wrecks were common, and some coastal communities even profited from them.

The eighteenth and nineteenth centuries changed everything. Engineers such as John Smeaton learned to build towers of interlocking granite blocks that could survive the force of Atlantic storms on exposed rocks. Smeaton's tower on the Eddystone reef, finished in 1759, used hydraulic lime that set under water, and its design was copied around the world. In France, Augustin Fresnel invented a lens made of concentric rings of glass prisms. A Fresnel lens gathered almost all the light from a single lamp and bent it into a narrow, powerful beam that could be seen more than twenty miles away.

Lighthouses also gained identities. By rotating the lens, or by covering and uncovering the lamp, each station produced its own pattern of flashes, called its characteristic. A navigator who counted two quick flashes every ten seconds could look up the pattern in a printed list and know exactly which headland lay ahead. Fog signals, from bells to steam whistles to diaphragm horns, did the same work when the light could not be seen.

The life of a keeper was hard and often lonely. Keepers trimmed wicks, polished brass and glass, wound the clockwork that turned the lens, and kept a log of the weather and passing ships. On remote rock stations, crews of three men lived for weeks without relief, and storms sometimes cut them off from the mainland for months.

In the twentieth century electricity, radio beacons and finally satellite navigation reduced the importance of the lighthouse. Most stations were automated, and the last keepers left their towers. Yet many lights still shine every night, maintained by small teams who visit by boat or helicopter, and the towers themselves have become museums, hotels and symbols of safety.

Summarise the passage above in three sentences."""

RAW_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived",
    "1, 2, 3, 4, 5,",
    "Les plus beaux jardins de Paris sont",
]
CHAT_CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant. Answer in one word."},
     {"role": "user", "content": "What colour is the sky on a clear day?"}],
    [{"role": "user", "content": "Write a haiku about autumn leaves."}],
    [{"role": "user", "content": "Hi! My name is Ada."},
     {"role": "assistant", "content": "Hello Ada! How can I help you today?"},
     {"role": "user", "content": "What is my name?"}],
    [{"role": "user", "content": LONG_DOCUMENT}],
]


def render_chat(template, messages):
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=True, bos_token="<|im_start|>", eos_token="<|im_end|>")


def last_argmax(llm):
    """The greedy token after the last token evaluated (without logits_all)."""
    logits = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return int(np.argmax(np.ctypeslib.as_array(logits, shape=(llm.n_vocab(),))))


def bench_protocol():
    """The benchmarks' shared texts and lengths (crate/src/bench_protocol.json)."""
    with open(os.path.join(ROOT, "crate", "src", "bench_protocol.json")) as f:
        return json.load(f)


def without_weight_repacking():
    """Loads weights as stored. llama.cpp's CPU repacking picks AMX kernels whenever the CPU
    advertises AMX, and some virtual machines advertise it without enabling it (SIGILL)."""
    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_cpp.llama_model_default_params = params
    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def main():
    without_weight_repacking()
    # An f32 KV cache: with llama.cpp's default f16 cache its CPU attention also rounds queries
    # and softmax probabilities to f16, which moves this small model's logits by up to ~0.4 and
    # flips near-even choices. The f32 cache is llama.cpp's most exact configuration.
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=2048, n_batch=512, n_threads=os.cpu_count(),
                          logits_all=True, verbose=False, flash_attn=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    template = llm.metadata["tokenizer.chat_template"]
    cases = [{"name": f"raw-{i}", "kind": "raw", "text": p} for i, p in enumerate(RAW_PROMPTS)]
    cases += [{"name": f"chat-{i}", "kind": "chat", "messages": m, "text": render_chat(template, m)}
              for i, m in enumerate(CHAT_CONVERSATIONS)]
    for case in cases:
        prompt = llm.tokenize(case["text"].encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt)
        out, top = [], []
        for _ in range(N_CONTINUE):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            order = np.argsort(-logits)[:2]
            out.append(int(order[0]))
            top.append([[int(t), round(float(logits[t]), 4)] for t in order])
            llm.eval([int(order[0])])
        case["prompt_ids"] = [int(t) for t in prompt]
        case["greedy_ids"] = out
        case["greedy_top2"] = top
        case["greedy_text"] = llm.detokenize(out).decode("utf-8", errors="replace")
        print(f"{case['name']}: {len(prompt)} prompt tokens -> {case['greedy_text']!r}", file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump({"model": os.path.basename(MODEL), "generator": f"llama-cpp-python {llama_cpp.__version__}, f32 KV cache, no flash attention",
                   "n_continue": N_CONTINUE, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
