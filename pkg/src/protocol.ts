// The messages between the page (client.ts) and the engine's worker (worker.ts). Every call
// carries an id; the worker answers it with exactly one "return" or "throw", after any number of
// "progress" (loading) or "token" (streaming) events with the same id.

import type { WireError } from "./errors.js";
import type { CacheStats, ChatMessageParam, DeviceLostEvent, FunctionTool, GenerationStats, LoadProgress, ModelInfo, ResponseFormat, TokenLogprob, ToolChoice } from "./types.js";

/** Sampling fields as the wasm engine takes them (`stop` always a list). */
export interface SamplingParams {
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
  stop?: string[];
  ignore_eos?: boolean;
  response_format?: ResponseFormat;
  max_completion_tokens?: number;
  n?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  repetition_penalty?: number;
  penalty_last_n?: number;
  logit_bias?: Record<string, number>;
  /** A chat's `true` (with `top_logprobs`) or a completion's count of alternatives. */
  logprobs?: boolean | number;
  top_logprobs?: number;
}

/** A validated chat request, sent to WasmEngine.start_chat as JSON. */
export interface ChatParams extends SamplingParams {
  messages: ChatMessageParam[];
  tools?: FunctionTool[];
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;
}

/** A validated text completion request, sent to WasmEngine.start_completion as JSON. */
export interface CompletionParams extends SamplingParams {
  prompt: string;
}

/** A prefix to pin or unpin, sent to WasmEngine.pin/unpin as JSON. */
export type Prefix = { messages: ChatMessageParam[]; tools?: FunctionTool[] } | { text: string };

/** The model as the page hands it over: an absolute URL, or bytes (transferred) or a Blob. */
export type WireSource =
  | { kind: "url"; url: string; cache: boolean }
  | { kind: "bytes"; bytes: ArrayBuffer }
  | { kind: "blob"; blob: Blob };

/** WasmLoader.create's options, sent as JSON once the worker has resolved "auto". */
export interface LoaderOptions {
  backend: "auto" | "webgpu" | "cpu";
  /** The CPU backend's threads; unset: the worker chooses (threads.ts). */
  threads?: number;
  kv_budget_bytes: number;
  max_batch: number;
  max_context?: number;
  spill: "q8" | "q4" | "off";
  spill_budget_bytes: number;
}

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
