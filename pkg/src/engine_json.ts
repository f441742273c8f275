// The JSON the wasm engine returns, and its conversion into the package's types (in the worker).

import type { Generation } from "./protocol.js";
import type { CacheStats, GenerationStats, ModelInfo, TokenLogprob } from "./types.js";

type WasmFinish = "stop" | "length" | "tool_calls" | "context_full" | "abort";

/** One choice of a "done" event. */
interface DoneChoice {
  index: number;
  finish_reason: WasmFinish;
  text: string;
  tokens: number[];
  /** Each token's logit lead over the runner-up. */
  top2_gaps: number[];
  logprobs: TokenLogprob[] | null;
  tool_calls: { name: string; arguments: string }[] | null;
}

/** The "done" event of a request: every choice and the counts; "abort" if it was aborted, else the first choice's finish. */
export interface DoneEvent {
  type: "done";
  finish_reason: WasmFinish;
  choices: [DoneChoice, ...DoneChoice[]];
  usage: { prompt_tokens: number; completion_tokens: number; cached_tokens: number; restored_tokens: number };
  stats: GenerationStats;
}

/**
 * What one WasmEngine.step() did. A token's text is "" while it is held back (partial UTF-8,
 * maybe a stop string); `index` is its choice. "choice_done": a choice ended, the next follows.
 */
export type StepEvent =
  | { type: "prefill"; done: number; total: number }
  | { type: "token"; index: number; token: number; text: string; logprob: TokenLogprob | null }
  | { type: "choice_done"; index: number }
  | DoneEvent;

/** WasmEngine.step()'s answer. */
export const parseStep = (json: string): StepEvent => JSON.parse(json) as StepEvent;

/** WasmEngine.abort()'s answer: the "done" event, or null when no request was running. */
export const parseAbort = (json: string): DoneEvent | null => JSON.parse(json) as DoneEvent | null;

/** `map` over a non-empty list, keeping it non-empty. */
export function mapChoices<T, U>(list: [T, ...T[]], f: (item: T, index: number) => U): [U, ...U[]] {
  return list.map(f) as [U, ...U[]];
}

/** A finished request; "context_full" is reported as OpenAI's "length". */
export function generation(done: DoneEvent): Generation {
  return {
    choices: mapChoices(done.choices, (c) => ({
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

interface WasmInfo {
  model_name: string;
  architecture: string;
  n_layers: number;
  n_embd: number;
  vocab_size: number;
  n_ctx: number;
  max_context: number;
  page_size: number;
  adapter: string;
  backend: "webgpu" | "cpu";
  threads: number;
  fingerprint: string;
  has_chat_template: boolean;
}

/** WasmEngine.info() as the public ModelInfo. */
export function modelInfo(json: string): ModelInfo {
  const i = JSON.parse(json) as WasmInfo;
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
  };
}

interface WasmCacheStats {
  page_size: number;
  total_pages: number;
  free_pages: number;
  cached_pages: number;
  evictable_pages: number;
  locked_pages: number;
  pinned_pages: number;
  nodes: number;
  tokens_reused: number;
  requests: number;
  spill: {
    format: "q8" | "q4";
    bytes_per_page: number;
    store: { records: number; bytes: number; budget_bytes: number };
    pending_pages: number;
    records_written: number;
    tokens_restored: number;
    records_rejected: number;
    store_errors: number;
    last_store_error: string | null;
  } | null;
  spill_note: string | null;
}

/** WasmEngine.stats() as the public CacheStats. */
export function cacheStats(json: string): CacheStats {
  const s = JSON.parse(json) as WasmCacheStats;
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
