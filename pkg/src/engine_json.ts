// The values the wasm engine returns, typed by the declarations generated from the crate's Rust
// types (dist/wasm/radixlm.d.ts, copied to src/wasm/ by the build), and their conversion into the
// package's types (in the worker).

import { InternalError } from "./errors.js";
import type { Generation } from "./protocol.js";
import type { CacheStats, ModelInfo } from "./types.js";
import type { EngineStats, ModelInfo as WasmInfo, RequestResult, StepEvent } from "./wasm/radixlm.js";

export type { RequestResult, StepEvent };

/** `map` over a non-empty list, keeping it non-empty. */
export function mapChoices<T, U>(list: [T, ...T[]], f: (item: T, index: number) => U): [U, ...U[]] {
  return list.map(f) as [U, ...U[]];
}

/** A finished request; "context_full" is reported as OpenAI's "length". */
export function generation(done: RequestResult): Generation {
  const [first, ...rest] = done.choices;
  if (!first) throw new InternalError("A request ended without choices.");
  return {
    choices: mapChoices([first, ...rest], (c) => ({
      text: c.text,
      tokens: c.tokens,
      top2Gaps: c.top2_gaps,
      finishReason: c.finish_reason === "stop" || c.finish_reason === "tool_calls" ? c.finish_reason : "length",
      logprobs: c.logprobs,
      toolCalls: c.tool_calls,
    })),
    usage: done.usage,
    stats: done.stats,
  };
}

/** WasmEngine.info() as the public ModelInfo. */
export function modelInfo(i: WasmInfo): ModelInfo {
  return {
    modelName: i.model_name,
    architecture: i.architecture,
    nLayers: i.n_layers,
    nEmbd: i.n_embd,
    vocabSize: i.vocab_size,
    nCtx: i.n_ctx,
    maxContext: i.max_context,
    pageSize: i.page_size,
    adapter: i.adapter,
    backend: i.backend,
    threads: i.threads,
    fingerprint: i.fingerprint,
    hasChatTemplate: i.has_chat_template,
    toolFormat: i.tool_format,
    toolCallOpener: i.tool_call_opener,
  };
}

/** WasmEngine.stats() as the public CacheStats. */
export function cacheStats(s: EngineStats): CacheStats {
  return {
    pageSize: s.page_size,
    totalPages: s.total_pages,
    freePages: s.free_pages,
    cachedPages: s.cached_pages,
    evictablePages: s.evictable_pages,
    lockedPages: s.locked_pages,
    pinnedPages: s.pinned_pages,
    nodes: s.nodes,
    tokensReused: s.tokens_reused,
    requests: s.requests,
    spill: s.spill && {
      format: s.spill.format,
      bytesPerPage: s.spill.bytes_per_page,
      records: s.spill.store.records,
      bytes: s.spill.store.bytes,
      budgetBytes: s.spill.store.budget_bytes,
      pendingPages: s.spill.pending_pages,
      recordsWritten: s.spill.records_written,
      tokensRestored: s.spill.tokens_restored,
      recordsRejected: s.spill.records_rejected,
      storeErrors: s.spill.store_errors,
      lastStoreError: s.spill.last_store_error,
    },
    spillNote: s.spill_note,
  };
}
