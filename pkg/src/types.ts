// The public, OpenAI-shaped types of the package. Request and response fields keep OpenAI's
// snake_case so code written for its API reads the same; radixlm's own objects are camelCase.

/** Options of {@link createEngine}. */
export interface EngineOptions {
  /**
   * The GGUF model: a URL (string or URL, resolved against the page's location), an ArrayBuffer
   * (transferred to the engine's worker, so it is detached afterwards) or a Blob (a File too).
   */
  model: string | URL | ArrayBuffer | Blob;
  /**
   * What computes: "webgpu" (the GPU), "cpu" (WebAssembly SIMD in the engine's worker, the
   * weights and KV cache in wasm memory), or "auto" (the default): WebGPU on a hardware adapter,
   * the CPU where the browser has no WebGPU, no adapter, or only a software one (SwiftShader,
   * llvmpipe), which the CPU backend outruns. `engine.info.backend` says which was taken.
   */
  backend?: "auto" | "webgpu" | "cpu";
  /**
   * The CPU backend's threads: the engine's worker and a Web Worker for each further one, on
   * shared wasm memory. Threads need a cross-origin-isolated page (served with
   * `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`);
   * elsewhere the engine runs on one thread. Default: every core, up to 8.
   * `engine.info.threads` says how many run.
   */
  threads?: number;
  /** Bytes of memory for the KV cache (GPU memory, clamped to the adapter; or wasm memory). Default 256 MiB. */
  kvBudgetBytes?: number;
  /** Most prompt tokens one prefill step computes. Default 256. */
  maxBatch?: number;
  /** Most tokens (prompt and reply) of one request. Default: what the model and KV budget allow; `engine.info.maxContext` tells. */
  maxContext?: number;
  /** Called as the model downloads, uploads to the GPU and compiles. */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Called when the GPU device is lost (a driver reset, or the OS taking the GPU from a
   * background tab) and the engine loads the model onto a new device: once with "reloading",
   * again with `progress` as it uploads, then "ready" or "failed". Requests made meanwhile wait
   * for the new device; a reply that was streaming when the device went rejects with
   * DeviceLostError. The cached prefixes on the GPU are lost; those spilled to IndexedDB are not.
   */
  onDeviceLost?: (event: DeviceLostEvent) => void;
  /**
   * Keep a model fetched from a URL in the Cache API (cache "radixlm-models"), so the next load
   * takes it from disk. Default true. With false the cache is neither read nor written.
   */
  cacheModel?: boolean;
  /**
   * How KV pages are kept outside the GPU, in IndexedDB ("radixlm-spill"), so a cached prefix
   * survives eviction and page reloads: "q8" (8-bit, the default), "q4" (4-bit, half the bytes,
   * small drift in long replies) or "off".
   */
  spill?: "q8" | "q4" | "off";
  /**
   * Bytes IndexedDB may hold for spilled pages (least recently used go first). Default 512 MiB,
   * and never more than half of what `navigator.storage.estimate()` says the origin may use.
   */
  spillBudgetBytes?: number;
}

/** One stage of loading a model. */
export type LoadStage = "download" | "upload" | "compile";

/**
 * Loading progress. Per stage, `loaded` never decreases and never exceeds `total`; the last
 * "download" and "upload" events have `loaded === total` (the file's size). A model taken from
 * the Cache API, an ArrayBuffer or a Blob has no "download" events. One "compile" event
 * (`loaded === total === 1`) follows every other event.
 */
export interface LoadProgress {
  stage: LoadStage;
  /** Bytes so far ("download", "upload"); 1 for "compile". */
  loaded: number;
  /** The file's size, undefined while the server has not said (no Content-Length). */
  total: number | undefined;
}

/** See {@link EngineOptions.onDeviceLost}. */
export interface DeviceLostEvent {
  state: "reloading" | "ready" | "failed";
  /** What the browser said of the loss. */
  reason: string;
  /** The upload to the new device ("reloading" only). */
  progress?: LoadProgress;
  /** Why the model could not be loaded again ("failed" only). */
  error?: Error;
}

/** What the loaded model and GPU are. */
export interface ModelInfo {
  modelName: string;
  architecture: string;
  nLayers: number;
  nEmbd: number;
  vocabSize: number;
  /** The context length the model was trained for. */
  nCtx: number;
  /** The most tokens one request may hold on this engine. */
  maxContext: number;
  /** Tokens per KV-cache page (prefixes are cached in whole pages). */
  pageSize: number;
  /** What computes: the GPU through WebGPU, or the CPU in WebAssembly. */
  backend: "webgpu" | "cpu";
  /** The GPU adapter's description, or the CPU kernels' instruction set ("simd128 SIMD"). */
  adapter: string;
  /** Threads the CPU backend computes on (1 on WebGPU). */
  threads: number;
  /** Hex digest identifying the model's weights, metadata and tokenizer. */
  fingerprint: string;
  /** Whether the model's GGUF carries a chat template: without one (a base model), chat
   * requests are refused with an InvalidRequestError and completions serve it. */
  hasChatTemplate: boolean;
  /** How tools are shown to the model and its calls read: "generic" (radixlm's documented
   * format, through any chat template), or the model's own where its template has one:
   * "hermes" (Qwen2.5, Qwen3: `<tool_call>` blocks) or "llama3" (Llama 3.1-3.3: one JSON
   * object a reply). */
  toolFormat: "generic" | "hermes" | "llama3";
  /** What a reply of tool calls starts with in that format (a text reply may not). */
  toolCallOpener: string;
}

/** One message of a conversation. */
export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** A call the model made: `arguments` is JSON text valid against the function's `parameters`. */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** An assistant turn that called tools, as a reply gave it (send it back as it came). */
export interface AssistantToolCallMessage {
  role: "assistant";
  content: string | null;
  tool_calls: ToolCall[];
}

/** A tool's result, answering the call `tool_call_id`. */
export interface ToolMessage {
  role: "tool";
  tool_call_id: string;
  content: string;
}

/** Any message of a request's conversation. */
export type ChatMessageParam = ChatMessage | AssistantToolCallMessage | ToolMessage;

/** A function the model may call (OpenAI's shape): `parameters` is a JSON Schema of its arguments object. */
export interface FunctionTool {
  type: "function";
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null };
}

/**
 * Whether the reply may call tools: "auto" (the default with tools: text or calls), "none"
 * (text), "required" (one or more calls), or one call of the named function.
 */
export type ToolChoice = "auto" | "none" | "required" | { type: "function"; function: { name: string } };

/** Sampling and control fields shared by chat and text completions. */
export interface SamplingRequest {
  /** Most tokens to generate (a positive integer). */
  max_tokens?: number;
  /** 0 picks the likeliest token every time (greedy); higher is more random. */
  temperature?: number;
  /** Nucleus sampling: keep the likeliest tokens whose probabilities sum to this (0 < top_p <= 1). */
  top_p?: number;
  /** Keep only the k likeliest tokens (0: no limit). */
  top_k?: number;
  /** Seed of the sampler: the same seed and request give the same reply; without one, each request draws its own. */
  seed?: number;
  /** Generation stops when the reply ends with one of these; the stop string is not returned. */
  stop?: string | string[];
  /** radixlm extra, as llama.cpp's: never choose an end-of-sequence token, so the reply runs to `max_tokens`. */
  ignore_eos?: boolean;
  /** Constrains the reply to JSON, a JSON Schema, a Lark grammar or a regex. */
  response_format?: ResponseFormat | null;
  /** OpenAI's newer name for `max_tokens` (set one, or both to the same value). */
  max_completion_tokens?: number | null;
  /** How many choices to generate (1 to 16). The prompt is computed once; each choice is sampled with the seed plus its index. */
  n?: number | null;
  /** Lowers a token's logit by this much per time it occurs in the recent tokens (-2 to 2). */
  frequency_penalty?: number | null;
  /** Lowers the logit of a token that occurs in the recent tokens by this much (-2 to 2). */
  presence_penalty?: number | null;
  /**
   * radixlm extra, llama.cpp's repetition penalty: a recent token's logit is divided by it
   * (multiplied when negative). 1 is off; 1.1-1.3 stops a small model looping.
   */
  repetition_penalty?: number | null;
  /** radixlm extra: how many recent tokens (prompt and reply) the penalties count. Default 64. */
  penalty_last_n?: number | null;
  /** Token id (as a string key) to a bias (-100 to 100) added to its logit; -100 all but bans it. */
  logit_bias?: Record<string, number> | null;
  /** Aborts the request: it rejects (or its stream throws) with an AbortError. */
  signal?: AbortSignal;
  /** true: resolve to an async iterable of chunks as tokens arrive. */
  stream?: boolean | null;
  /** With `stream`: `include_usage` adds a last chunk with empty `choices` and the request's `usage`. */
  stream_options?: { include_usage?: boolean | null } | null;
}

/** One token's log-probability, OpenAI's shape (`bytes`: its UTF-8 bytes, which may be part of a character). */
export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  /** radixlm extra: the token's id in the model's vocabulary. */
  id: number;
  /** The likeliest tokens at this step, largest first (`top_logprobs` of them). */
  top_logprobs: { token: string; logprob: number; bytes: number[]; id: number }[];
}

/** A chat choice's log-probabilities (with `logprobs: true`). */
export interface ChatLogprobs {
  content: TokenLogprob[] | null;
  refusal: null;
}

/** A text completion choice's log-probabilities (with `logprobs: k`), OpenAI's legacy shape. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  /** Per token, the `k` likeliest tokens' log-probabilities by token text. */
  top_logprobs: Record<string, number>[];
  /** Per token, its offset in the choice's text (in UTF-16 code units, as JavaScript strings index). */
  text_offset: number[];
  /** radixlm extra: the same tokens in the chat shape (with their ids and their alternatives' ids). */
  content: TokenLogprob[];
}

/** A chat completion request, as OpenAI's `chat.completions.create` takes it. */
export interface ChatCompletionRequest extends SamplingRequest {
  /** The whole conversation so far; the prefix cache reuses what earlier turns computed. */
  messages: ChatMessageParam[];
  /**
   * Functions the model may call. They render first, before the conversation, so requests with
   * the same tools share their cached pages; a call's arguments are held to the function's schema.
   */
  tools?: FunctionTool[] | null;
  tool_choice?: ToolChoice | null;
  /** false: at most one call per reply. Default true. */
  parallel_tool_calls?: boolean | null;
  /** Ignored: the engine's model answers (accepted so OpenAI-style calls work unchanged). */
  model?: string;
  /** Each token's log-probability in `choices[i].logprobs.content`. */
  logprobs?: boolean | null;
  /** With `logprobs`: this many likeliest alternatives per token (0 to 20). */
  top_logprobs?: number | null;
}

/** A raw text completion request (the model's BOS token is added as the model wants). */
export interface CompletionRequest extends SamplingRequest {
  prompt: string;
  /** Ignored: the engine's model answers. */
  model?: string;
  /** Each token's log-probability and this many likeliest alternatives' (0 to 20), in `choices[i].logprobs`. */
  logprobs?: number | null;
}


/** Why generation ended: a stop token or string, or max_tokens or the context was reached. */
export type FinishReason = "stop" | "length" | "tool_calls";

/** Token counts of one request. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: {
    /** Prompt tokens whose KV was still on the GPU (the prefix cache) instead of being computed. */
    cached_tokens: number;
    /** Prompt tokens whose KV came back from IndexedDB (the spill tier) instead of being computed. */
    restored_tokens: number;
  };
}

/**
 * radixlm's timing of one request. With `n` choices: the prompt's figures are the first
 * choice's (the others computed none of it), `generated_tokens` and the decode rate cover every
 * choice, and `mask` is the worst choice's.
 */
export interface GenerationStats {
  prompt_tokens: number;
  /** Prompt tokens reused from the prefix cache on the GPU. */
  reused_tokens: number;
  /** Prompt tokens restored from the spill tier (IndexedDB). */
  restored_tokens: number;
  /** Prompt tokens computed by this request. */
  prefilled_tokens: number;
  generated_tokens: number;
  /** Milliseconds from the request's start to its first generated token. */
  ttft_ms: number;
  prefill_tokens_per_s: number;
  decode_tokens_per_s: number;
  /** With a `response_format`: what computing the grammar's token masks cost (one per step). */
  mask: MaskStats | null;
}

/** Milliseconds per step spent computing a constrained request's token masks. */
export interface MaskStats {
  steps: number;
  mean_ms: number;
  median_ms: number;
  p99_ms: number;
  max_ms: number;
}

/**
 * What the reply must be, as OpenAI's `response_format`: any JSON object, or JSON valid against a
 * schema; radixlm adds a Lark grammar (llguidance's dialect) and a regular expression the whole
 * reply matches. The engine masks every token the format forbids, so the reply parses (unless
 * `max_tokens` cuts it: finish_reason "length").
 */
export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; json_schema: { name: string; description?: string; schema: Record<string, unknown>; strict?: boolean | null } }
  | { type: "grammar"; grammar: string }
  | { type: "regex"; pattern: string };

/** radixlm extras of a choice: its generated token ids, and per token its logit's lead over the runner-up's (under ~0.1: a near tie). */
export interface ChoiceTokens {
  tokens: number[];
  top2_gaps: number[];
}

/** One choice of a whole chat reply. */
export interface ChatChoice extends ChoiceTokens {
  index: number;
  /** A reply of calls has `content: null` and `tool_calls` (finish_reason "tool_calls"). */
  message: { role: "assistant"; content: string | null; tool_calls?: ToolCall[] };
  finish_reason: FinishReason;
  logprobs: ChatLogprobs | null;
}

/** A whole chat reply. */
export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  /** Unix time in seconds. */
  created: number;
  model: string;
  /** `n` choices (one by default). */
  choices: [ChatChoice, ...ChatChoice[]];
  /** The prompt counted once, as it was computed once; the completion tokens of every choice. */
  usage: Usage;
  /** radixlm extra: timings and cache reuse (over every choice: see {@link GenerationStats}). */
  stats: GenerationStats;
  /** radixlm extra: the first choice's generated token ids. */
  tokens: number[];
  /** radixlm extra: the first choice's top-2 logit gaps. */
  top2_gaps: number[];
}

/** What a chunk adds to its choice; a reply of calls comes as one delta holding them whole. */
export interface ChatDelta {
  role?: "assistant";
  content?: string;
  tool_calls?: (ToolCall & { index: number })[];
}

/**
 * One piece of a streamed chat reply. A choice's first chunk carries `delta.role`; its last has an
 * empty delta, `finish_reason`, and its `tokens` and `top2_gaps`; the request's last chunk also
 * `usage` and `stats` (and with `stream_options.include_usage` one more follows, with no
 * choices and the usage). A choice's `delta.content`s concatenated are its reply.
 */
export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: { index: number; delta: ChatDelta; finish_reason: FinishReason | null; logprobs?: ChatLogprobs | null }[];
  usage?: Usage;
  stats?: GenerationStats;
  tokens?: number[];
  top2_gaps?: number[];
}

/** One choice of a whole text completion. */
export interface CompletionChoice extends ChoiceTokens {
  index: number;
  text: string;
  finish_reason: FinishReason;
  logprobs: CompletionLogprobs | null;
}

/** A whole text completion. */
export interface Completion {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: [CompletionChoice, ...CompletionChoice[]];
  usage: Usage;
  stats: GenerationStats;
  tokens: number[];
  top2_gaps: number[];
}

/** One piece of a streamed text completion; each choice's last has empty text and `finish_reason`, the request's last `usage` too. */
export interface CompletionChunk {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: { index: number; text: string; finish_reason: FinishReason | null; logprobs?: CompletionLogprobs | null }[];
  usage?: Usage;
  stats?: GenerationStats;
  tokens?: number[];
  top2_gaps?: number[];
}

/** The prefix cache's state, in KV pages of {@link ModelInfo.pageSize} tokens. */
export interface CacheStats {
  pageSize: number;
  totalPages: number;
  freePages: number;
  /** Pages holding cached prefixes. */
  cachedPages: number;
  /** Cached pages that may be evicted to make room. */
  evictablePages: number;
  /** Pages in use by the running request. */
  lockedPages: number;
  /** Pages kept by {@link EngineCache.pin}. */
  pinnedPages: number;
  /** Nodes of the radix tree. */
  nodes: number;
  /** Prompt tokens reused from the cache, summed over every request so far. */
  tokensReused: number;
  /** Requests run so far. */
  requests: number;
  /** The spill tier (IndexedDB), or null when it is off or unavailable (`spillNote` says why). */
  spill: SpillStats | null;
  /** Why the spill tier is off although it was asked for (no IndexedDB, an unsupported head size). */
  spillNote: string | null;
}

/** The spill tier: quantized KV pages in IndexedDB. */
export interface SpillStats {
  format: "q8" | "q4";
  /** Bytes one stored page takes (all layers, K and V). */
  bytesPerPage: number;
  /** Pages stored for any model of this origin, and their bytes. */
  records: number;
  bytes: number;
  budgetBytes: number;
  /** Pages quantized on the GPU on their way to IndexedDB. */
  pendingPages: number;
  recordsWritten: number;
  tokensRestored: number;
  /** Records that failed verification; each was deleted and missed. */
  recordsRejected: number;
  /** IndexedDB operations that failed (a full quota, ...); none fails a request. */
  storeErrors: number;
  lastStoreError: string | null;
}

/** `engine.chat.completions`. */
export interface ChatCompletions {
  /** Resolves to the whole reply. */
  create(request: ChatCompletionRequest & { stream?: false | null }): Promise<ChatCompletion>;
  /** Resolves to the reply's chunks as they are generated; breaking out of the loop aborts it. */
  create(request: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
  /** Either, as `stream` says. */
  create(request: ChatCompletionRequest): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
}

/** `engine.completions`. */
export interface Completions {
  /** Resolves to the whole completion. */
  create(request: CompletionRequest & { stream?: false | null }): Promise<Completion>;
  /** Resolves to the completion's chunks as they are generated; breaking out of the loop aborts it. */
  create(request: CompletionRequest & { stream: true }): Promise<AsyncIterable<CompletionChunk>>;
  /** Either, as `stream` says. */
  create(request: CompletionRequest): Promise<Completion | AsyncIterable<CompletionChunk>>;
}

/** A prefix to pin: a conversation, raw text, or tools (and a conversation after them) as requests with those tools begin. */
export type PrefixToPin = ChatMessageParam[] | string | { tools: FunctionTool[]; messages?: ChatMessageParam[] };

/** `engine.cache`: the prefix cache, on the GPU and spilled to IndexedDB. */
export interface EngineCache {
  /**
   * Keeps a prefix (messages as the chat template renders them, without opening the assistant
   * turn; `{ tools, messages }` as a request with those tools renders them; or raw text) in the
   * cache until unpinned, computing it now if it is not cached.
   * Resolves to the number of pinned tokens (whole pages).
   */
  pin(prefix: PrefixToPin): Promise<number>;
  /** Undoes one pin of the same prefix; false if it was not pinned. */
  unpin(prefix: PrefixToPin): Promise<boolean>;
  /** The cache's state (answered between engine steps, even while a request runs). */
  stats(): Promise<CacheStats>;
  /** Empties both tiers: every cached prefix not in use on the GPU, pinned ones too, and this model's pages in IndexedDB. */
  clear(): Promise<void>;
}

/** `engine.debug`: test and diagnostics hooks, not for apps. */
export interface EngineDebug {
  /** Destroys the engine's GPUDevice, as a driver reset would; the next request reloads the model. */
  destroyDevice(): Promise<void>;
  /** Bytes of the worker's WebAssembly memory (its peak: wasm memory never shrinks). */
  wasmMemoryBytes(): Promise<number>;
  /** How many times the model was uploaded again after a lost device. */
  reloads(): Promise<number>;
}

/**
 * A model loaded on the GPU, run in a dedicated worker. Requests are queued and run one at a
 * time, in the order they were made.
 */
export interface Engine {
  readonly info: ModelInfo;
  readonly chat: { readonly completions: ChatCompletions };
  readonly completions: Completions;
  readonly cache: EngineCache;
  readonly debug: EngineDebug;
  /** Frees the GPU memory and ends the worker; calls made after it reject with EngineDisposedError. */
  dispose(): Promise<void>;
}
