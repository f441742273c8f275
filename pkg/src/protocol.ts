// The messages between the page (client.ts) and the engine's worker (worker.ts). Every call
// carries an id; the worker answers it with exactly one "return" or "throw", after any number of
// "progress" (loading) or "token" (streaming) events with the same id.

import type { WireError } from "./errors.js";
import type { CacheStats, DeviceLostEvent, GenerationStats, LoadProgress, ModelInfo, TokenLogprob } from "./types.js";
import type { ChatMessage, LoadOptions, Prefix, RequestFields } from "./wasm/radixlm.js";

/**
 * A checked request as WasmEngine.start_chat / start_completion take it: the crate's
 * RequestFields, whose declaration is generated from the Rust type.
 */
export type SamplingParams = Omit<RequestFields, "messages" | "prompt" | "tools" | "tool_choice" | "parallel_tool_calls">;

/** A checked chat request. */
export type ChatParams = RequestFields & { messages: ChatMessage[] };

/** A checked text completion request. */
export type CompletionParams = RequestFields & { prompt: string };

/** A prefix to pin or unpin, as WasmEngine.pin/unpin take it. */
export type { Prefix };

/** The model as the page hands it over: an absolute URL, or bytes (transferred) or a Blob. */
export type WireSource =
  | { kind: "url"; url: string; cache: boolean }
  | { kind: "bytes"; bytes: ArrayBuffer }
  | { kind: "blob"; blob: Blob };

/** WasmLoader.create's options (the crate's LoadOptions) with "auto" still to be resolved by the worker. */
export type LoaderOptions = Omit<LoadOptions, "backend"> & { backend: "auto" | "webgpu" | "cpu" };

/** One choice of a finished generation. */
export interface GeneratedChoice {
  text: string;
  tokens: number[];
  /** Per token: its logit's lead over the runner-up's. */
  top2Gaps: number[];
  finishReason: "stop" | "length" | "tool_calls";
  /** Per token, when the request asked for log-probabilities. */
  logprobs: TokenLogprob[] | null;
  /** When the reply is tool calls: each call's name and arguments (the page gives them ids). */
  toolCalls: { name: string; arguments: string }[] | null;
}

/** A finished generation; the page shapes it into an OpenAI response. */
export interface Generation {
  choices: [GeneratedChoice, ...GeneratedChoice[]];
  usage: { prompt_tokens: number; completion_tokens: number; cached_tokens: number; restored_tokens: number };
  stats: GenerationStats;
}

type NoParams = Record<never, never>;

/** Every call: what it sends besides its kind and id, and what its "return" carries. */
export interface Calls {
  load: { params: { source: WireSource; options: LoaderOptions }; result: ModelInfo };
  /** A chat request (it has messages) or a text completion (a prompt); "token" events when streaming. */
  generate: { params: { request: ChatParams | CompletionParams; stream: boolean }; result: Generation };
  pin: { params: { prefix: Prefix }; result: number };
  unpin: { params: { prefix: Prefix }; result: boolean };
  stats: { params: NoParams; result: CacheStats };
  clear: { params: NoParams; result: void };
  destroyDevice: { params: NoParams; result: void };
  wasmMemoryBytes: { params: NoParams; result: number };
  reloads: { params: NoParams; result: number };
  dispose: { params: NoParams; result: void };
}

/** The kinds of call. */
export type CallKind = keyof Calls;

/** A call of one kind (or any kind), as posted to the worker. */
export type Call<K extends CallKind = CallKind> = { [P in K]: { kind: P; id: number } & Calls[P]["params"] }[K];

/** Page to worker: a call, or "abort" naming the id of a running or queued "generate". */
export type ToWorker = Call | { kind: "abort"; id: number };

/** A {@link DeviceLostEvent} as posted: the error in its wire form. */
export type WireDeviceLostEvent = Omit<DeviceLostEvent, "error"> & { error?: WireError };

/**
 * Worker to page. "fatal" (no id) means the wasm module died: every call is over. "deviceLost"
 * (no id) reports the engine's move to a new GPU device.
 */
export type FromWorker =
  | { kind: "deviceLost"; event: WireDeviceLostEvent }
  | { kind: "return"; id: number; value: unknown }
  | { kind: "throw"; id: number; error: WireError }
  | { kind: "progress"; id: number; progress: LoadProgress }
  | { kind: "token"; id: number; index: number; text: string; logprob: TokenLogprob | null }
  | { kind: "fatal"; error: WireError };
