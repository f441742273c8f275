#!/usr/bin/env python3
"""The CPU peer for `radixlm bench prefix`: llama.cpp (llama-cpp-python) on the same GGUF with the
protocol of crate/src/bench_protocol.json (the filler document of P tokens, then DELTA tokens of
the question). Cold: the whole prompt from an empty context. Warm: llama.cpp's own state restore,
the KV state saved after the document (`save_state`) loaded again, then the question alone. TTFT
(to the first greedy token) medians over REPEATS interleaved runs, and the warm / cold speedup.
Control: the warm path's first CHECK greedy tokens equal cold's, and differ from the question
alone (a restore that lost the document fails); a failed control voids the row and the exit code.

Usage: python3 scripts/llama_cpp_prefix.py [MODEL] [PREFIX_LENS (128,512,1024)] [REPEATS]
"""
import importlib.util
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("goldens", os.path.join(ROOT, "scripts", "make_goldens.py"))
goldens = importlib.util.module_from_spec(spec)
spec.loader.exec_module(goldens)

import llama_cpp  # noqa: E402

PROTOCOL = goldens.bench_protocol()

model = sys.argv[1] if len(sys.argv) > 1 else goldens.MODEL
prefix_lens = [int(p) for p in sys.argv[2].split(",")] if len(sys.argv) > 2 else PROTOCOL["prefix_lens"]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else PROTOCOL["repeats"]
delta, check = PROTOCOL["delta"], PROTOCOL["check_tokens"]
threads = os.cpu_count()

goldens.without_weight_repacking()
llm = llama_cpp.Llama(model_path=model, n_ctx=max(prefix_lens) + delta + check + 8, n_batch=512, n_threads=threads,
                      n_threads_batch=threads, logits_all=False, verbose=False)
filler = llm.tokenize(PROTOCOL["filler"].encode(), add_bos=False, special=False)
question = llm.tokenize(PROTOCOL["question"].encode(), add_bos=False, special=False)
suffix = (question * (delta // len(question) + 1))[:delta]


def first_token(tokens):
    """Evaluates `tokens` after what the context holds; returns (first greedy token, ms)."""
    t0 = time.perf_counter()
    llm.eval(tokens)
    tok = goldens.last_argmax(llm)
    return tok, (time.perf_counter() - t0) * 1000


def continue_greedy(tok, n):
    out = [tok]
    while len(out) < n:
        llm.eval([out[-1]])
        out.append(goldens.last_argmax(llm))
    return out


def cold(prompt, n=1):
    llm.reset()
    tok, ms = first_token(prompt)
    return continue_greedy(tok, n), ms


def warm(state, n=1):
    t0 = time.perf_counter()
    llm.load_state(state)
    tok, _ = first_token(suffix)
    ms = (time.perf_counter() - t0) * 1000
    return continue_greedy(tok, n), ms


rows, failed_any = [], False
for p in prefix_lens:
    prefix = (filler * (p // len(filler) + 1))[:p]
    prompt = prefix + suffix
    llm.reset()
    llm.eval(prefix)
    state = llm.save_state()
    cold_tokens, _ = cold(prompt, check)
    warm_tokens, _ = warm(state, check)
    control_tokens, _ = cold(suffix, check)
    failed = None
    if warm_tokens != cold_tokens:
        failed = f"warm greedy {check} tokens differ from cold"
    elif warm_tokens == control_tokens:
        failed = "warm greedy tokens equal the question-alone control (document lost)"
    cold_ms, warm_ms = [], []
    for _ in range(repeats):
        c, ms = cold(prompt)
        cold_ms.append(ms)
        w, ms = warm(state)
        warm_ms.append(ms)
        if c[0] != cold_tokens[0] or w[0] != cold_tokens[0]:
            failed = failed or "a timed run's first token differs from cold's"
    failed_any |= failed is not None
    rows.append({
        "prefix_len": p, "delta": delta, "state_bytes": state.llama_state_size,
        "cold_median_ms": statistics.median(cold_ms), "warm_median_ms": statistics.median(warm_ms),
        "speedup": statistics.median(cold_ms) / statistics.median(warm_ms), "failed_control": failed,
    })

print(f"llama.cpp {llama_cpp.__version__} CPU ({threads} threads), {os.path.basename(model)}: "
      f"prefix benchmark, delta {delta}, median of {repeats}")
print("| prefix | cold TTFT ms | warm (state restore) TTFT ms | speedup | state MiB | controls |")
print("|---:|---:|---:|---:|---:|---|")
for r in rows:
    verdict = f"FAILED: {r['failed_control']}" if r["failed_control"] else f"pass (warm {check} tokens = cold, differ from the control)"
    speedup = "void" if r["failed_control"] else f"{r['speedup']:.1f}×"
    print(f"| {r['prefix_len']} | {r['cold_median_ms']:.0f} | {r['warm_median_ms']:.0f} | {speedup} | "
          f"{r['state_bytes'] / 2**20:.1f} | {verdict} |")
print(json.dumps(rows))
sys.exit(1 if failed_any else 0)
