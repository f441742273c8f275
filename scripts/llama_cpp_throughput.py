#!/usr/bin/env python3
"""The CPU peer for `radixlm bench throughput`: llama.cpp (llama-cpp-python) on the same GGUF,
same prompt lengths. Prints prefill tokens/s for a PREFILL-token prompt and decode tokens/s over
DECODE greedy tokens, medians of REPEATS runs.

Usage: python3 scripts/llama_cpp_throughput.py [MODEL] [PREFILL] [DECODE] [REPEATS]
"""
import importlib.util
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("goldens", os.path.join(ROOT, "scripts", "make_goldens.py"))
goldens = importlib.util.module_from_spec(spec)
spec.loader.exec_module(goldens)

import llama_cpp  # noqa: E402

model = sys.argv[1] if len(sys.argv) > 1 else goldens.MODEL
prefill, decode, repeats = (int(a) for a in (sys.argv[2:5] + ["512", "128", "3"][len(sys.argv[2:5]):]))
goldens.without_weight_repacking()
llm = llama_cpp.Llama(model_path=model, n_ctx=prefill + decode + 8, n_batch=512, n_threads=os.cpu_count(),
                      logits_all=False, verbose=False)
unit = llm.tokenize(goldens.bench_protocol()["filler"].encode(), add_bos=False)
prompt = (unit * (prefill // len(unit) + 1))[:prefill]


pre, dec = [], []
for _ in range(repeats):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    pre.append(prefill / (time.perf_counter() - t0))
    tok = goldens.last_argmax(llm)
    t0 = time.perf_counter()
    for _ in range(decode - 1):
        llm.eval([tok])
        tok = goldens.last_argmax(llm)
    dec.append((decode - 1) / (time.perf_counter() - t0))
print(f"llama.cpp {llama_cpp.__version__} CPU ({os.cpu_count()} threads): "
      f"prefill {prefill} tokens {statistics.median(pre):.1f} tok/s | decode {decode} tokens {statistics.median(dec):.1f} tok/s "
      f"(median of {repeats})")
