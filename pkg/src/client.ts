// The page's side: createEngine starts the worker, and the Engine turns its API calls into
// numbered worker calls and the replies into OpenAI-shaped responses.

import {
  AbortError,
  EngineDisposedError,
  InternalError,
  NOT_STARTED,
  RadixlmError,
  WebGPUUnavailableError,
  fromWire,
} from "./errors.js";
import { mapChoices } from "./engine_json.js";
import { CACHE_NAME } from "./model_source.js";
import type { Call, CallKind, Calls, ChatParams, CompletionParams, FromWorker, GeneratedChoice, Generation, ToWorker } from "./protocol.js";
import type { AbortCounts } from "./errors.js";
import type {
  ChatCompletion,
  ChatChoice,
  ChatCompletionChunk,
  ChatDelta,
  ChatLogprobs,
  ChatCompletionRequest,
  ChatCompletions,
  Completion,
  CompletionChunk,
  CompletionLogprobs,
  CompletionRequest,
  Completions,
  DeviceLostEvent,
  Engine,
  EngineCache,
  EngineDebug,
  EngineOptions,
  LoadProgress,
  ModelInfo,
  SamplingRequest,
  TokenLogprob,
  ToolCall,
  Usage,
} from "./types.js";
import { checkChatRequest, checkCompletionRequest, checkEngineOptions, checkPrefix } from "./validate.js";

/**
 * Loads a model and resolves to an engine that runs it on the GPU or the CPU (`backend`), in a
 * dedicated worker. Rejects, with the worker ended, if the model cannot be fetched or loaded, or
 * if WebGPU was asked for and is missing.
 */
export async function createEngine(options: EngineOptions): Promise<Engine> {
  const { source, options: loader, transfer } = checkEngineOptions(options);
  // Fail here, fast, rather than after starting the worker and the wasm.
  if (loader.backend === "webgpu" && !navigator.gpu) throw new WebGPUUnavailableError();
  // Spilled pages should outlive storage pressure; only a window may ask (workers cannot), and a
  // refusal only means the browser may evict them, so the answer is not awaited.
  if (loader.spill !== "off") void navigator.storage?.persist?.().catch(() => false);
  const link = new WorkerLink(new Worker(new URL("./worker.js", import.meta.url), { type: "module" }), options.onDeviceLost);
  try {
    const { result } = link.start("load", { source, options: loader }, { onProgress: options.onProgress }, transfer);
    return new WorkerEngine(link, await result);
  } catch (error) {
    void link.dispose();
    throw error;
  }
}

/** Deletes the models kept in the Cache API (cache "radixlm-models"); the next load downloads again. */
export async function clearModelCache(): Promise<void> {
  if (typeof caches !== "undefined") await caches.delete(CACHE_NAME);
}

/** What a call's events go to. */
interface Listeners {
  onProgress?: ((progress: LoadProgress) => void) | undefined;
  onToken?: ((index: number, text: string, logprob: TokenLogprob | null) => void) | undefined;
}

interface Pending extends Listeners {
  resolve(value: unknown): void;
  reject(error: RadixlmError): void;
}

/** The page's end of the worker protocol: numbered calls, their events, and their one reply each. */
class WorkerLink {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  /** Why no call can be made any more (disposed, or crashed). */
  private closedBy: RadixlmError | undefined;

  constructor(
    private readonly worker: Worker,
    private readonly onDeviceLost: ((event: DeviceLostEvent) => void) | undefined,
  ) {
    worker.onmessage = (event: MessageEvent<FromWorker>) => this.receive(event.data);
    // The worker script or the wasm glue failed to load, or the worker threw outside any call.
    worker.onerror = (event) => {
      event.preventDefault();
      this.close(
        new InternalError(
          `The radixlm worker failed (${event.message || "it could not start"}). Check that dist/worker.js and dist/wasm/ are served next to dist/index.js, then reload the page.`,
        ),
      );
    };
  }

  /** Posts a call (moving `transfer` to the worker); `result` settles with its reply. */
  start<K extends CallKind>(
    kind: K,
    params: Calls[K]["params"],
    listeners: Listeners = {},
    transfer: Transferable[] = [],
  ): { id: number; result: Promise<Calls[K]["result"]> } {
    const id = this.nextId++;
    const result = new Promise<Calls[K]["result"]>((resolve, reject) => {
      if (this.closedBy) return reject(this.closedBy);
      this.pending.set(id, { ...listeners, resolve: resolve as (value: unknown) => void, reject });
      this.post({ ...params, kind, id } as Call, transfer);
    });
    return { id, result };
  }

  /** Posts a call and resolves to its result. */
  call<K extends CallKind>(kind: K, params: Calls[K]["params"]): Promise<Calls[K]["result"]> {
    return this.start(kind, params).result;
  }

  /** Asks the worker to stop the chat or completion `id`; it then rejects with AbortError. */
  abort(id: number): void {
    if (this.pending.has(id)) this.post({ kind: "abort", id });
  }

  /** Frees the engine in the worker, then ends the worker. Calls still pending reject with EngineDisposedError. */
  async dispose(): Promise<void> {
    if (this.closedBy instanceof EngineDisposedError) return;
    const freeing = this.closedBy ? undefined : this.start("dispose", {});
    this.shut(new EngineDisposedError(), freeing?.id);
    await freeing?.result.catch(() => {});
    this.worker.terminate();
  }

  /** The worker died: every call, pending or later, rejects with `reason`. */
  private close(reason: RadixlmError): void {
    this.shut(reason);
    this.worker.terminate();
  }

  /** Rejects every pending call but `keep`, and every later call, with `reason`. */
  private shut(reason: RadixlmError, keep?: number): void {
    this.closedBy = reason;
    for (const [id, pending] of this.pending) {
      if (id === keep) continue;
      this.pending.delete(id);
      pending.reject(reason);
    }
  }

  private post(message: ToWorker, transfer: Transferable[] = []): void {
    this.worker.postMessage(message, transfer);
  }

  private receive(message: FromWorker): void {
    if (message.kind === "fatal") return this.close(fromWire(message.error));
    if (message.kind === "deviceLost") {
      const { error, ...event } = message.event;
      return this.onDeviceLost?.(error ? { ...event, error: fromWire(error) } : event);
    }
    const pending = this.pending.get(message.id);
    if (!pending) return; // a call already rejected on this side (disposed, or a closed stream)
    switch (message.kind) {
      case "progress":
        return pending.onProgress?.(message.progress);
      case "token":
        return pending.onToken?.(message.index, message.text, message.logprob);
      case "return":
        this.pending.delete(message.id);
        return pending.resolve(message.value);
      case "throw":
        this.pending.delete(message.id);
        return pending.reject(fromWire(message.error));
    }
  }
}

/** A stream's chunks, buffered until the consumer asks; `return()` (leaving a for-await loop) cancels. */
class ChunkStream<T> implements AsyncIterableIterator<T> {
  private readonly buffered: T[] = [];
  private waiting: { resolve(result: IteratorResult<T>): void; reject(error: unknown): void } | undefined;
  /** Set once the stream has ended: with an error to throw after the buffered chunks, or null. */
  private ended: { error: RadixlmError | null } | undefined;
  private halted = false;

  constructor(private readonly onCancel: () => void) {}

  push(chunk: T): void {
    if (this.ended || this.halted) return;
    if (this.waiting) {
      this.waiting.resolve({ value: chunk, done: false });
      this.waiting = undefined;
    } else this.buffered.push(chunk);
  }

  /** Drops the buffered chunks and any more: the stream is being aborted and ends with its error. */
  halt(): void {
    this.halted = true;
    this.buffered.length = 0;
  }

  end(error: RadixlmError | null = null): void {
    if (this.ended) return;
    this.ended = { error };
    if (!this.waiting) return;
    if (error) this.waiting.reject(error);
    else this.waiting.resolve({ value: undefined, done: true });
    this.waiting = undefined;
  }

  next(): Promise<IteratorResult<T>> {
    const chunk = this.buffered.shift();
    if (chunk !== undefined) return Promise.resolve({ value: chunk, done: false });
    if (this.ended) {
      const { error } = this.ended;
      this.ended = { error: null }; // throw once, then report done
      return error ? Promise.reject(error) : Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  return(): Promise<IteratorResult<T>> {
    if (!this.ended) this.onCancel();
    this.ended = { error: null };
    this.buffered.length = 0;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/**
 * Sends a chat or completion to the worker. The request's AbortSignal stops it there (and calls
 * `onAbort` here at once); `onToken` receives each streamed text piece.
 */
function generate(
  link: WorkerLink,
  request: ChatParams | CompletionParams,
  signal: AbortSignal | undefined,
  stream?: { onToken(index: number, text: string, logprob: TokenLogprob | null): void; onAbort(): void },
): { result: Promise<Generation>; abort(): void } {
  if (signal?.aborted) return { result: Promise.reject(new AbortError(NOT_STARTED)), abort() {} };
  const call = link.start("generate", { request, stream: stream !== undefined }, { onToken: stream?.onToken });
  const abort = () => link.abort(call.id);
  const onAbort = () => {
    stream?.onAbort();
    abort();
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const result = call.result.then(
    (g) => {
      signal?.removeEventListener("abort", onAbort);
      // The reply crossed the abort on its way: the request still ends as aborted.
      if (signal?.aborted) throw new AbortError(finished(g));
      return g;
    },
    (error: unknown) => {
      signal?.removeEventListener("abort", onAbort);
      throw error;
    },
  );
  return { result, abort };
}

/** The abort counts of a request that had run to its end. */
function finished(g: Generation): AbortCounts {
  const { prompt_tokens, completion_tokens } = g.usage;
  return { promptTokensComputed: prompt_tokens, promptTokens: prompt_tokens, completionTokens: completion_tokens, stepsAfterAbort: 0 };
}

function usage(g: Generation): Usage {
  return {
    prompt_tokens: g.usage.prompt_tokens,
    completion_tokens: g.usage.completion_tokens,
    total_tokens: g.usage.prompt_tokens + g.usage.completion_tokens,
    prompt_tokens_details: { cached_tokens: g.usage.cached_tokens, restored_tokens: g.usage.restored_tokens },
  };
}

/** The fields every response and chunk of one request share. */
interface Head {
  id: string;
  created: number;
  model: string;
}

function head(prefix: string, model: string): Head {
  return { id: `${prefix}-${crypto.randomUUID().replaceAll("-", "")}`, created: Math.floor(Date.now() / 1000), model };
}

/** The request's figures, on a whole response and on a stream's last chunk: the first choice's tokens and gaps besides. */
function extras(g: Generation) {
  return { usage: usage(g), stats: g.stats, tokens: g.choices[0].tokens, top2_gaps: g.choices[0].top2Gaps };
}

/** How one kind of request shapes its responses. */
interface Shapes<Whole, Chunk> {
  whole(g: Generation): Whole;
  /** A text piece of choice `index` (and its token's log-probabilities), or nothing to show yet. */
  piece(index: number, text: string, logprob: TokenLogprob | null): Chunk | null;
  /** Choice `index`'s last chunks: any calls, then its finish reason and tokens; on the request's last, the counts. */
  last(g: Generation, index: number, final: boolean): Chunk[];
  /** `stream_options.include_usage`'s chunk: no choices, the usage. */
  usage(g: Generation): Chunk;
}

/** Runs one request and resolves to the whole response, or to its chunks when it streams. */
async function respond<Whole, Chunk>(
  link: WorkerLink,
  request: ChatParams | CompletionParams,
  options: SamplingRequest,
  shapes: Shapes<Whole, Chunk>,
): Promise<Whole | AsyncIterable<Chunk>> {
  if (options.stream !== true) return shapes.whole(await generate(link, request, options.signal).result);
  const stream = new ChunkStream<Chunk>(() => run.abort());
  const run = generate(link, request, options.signal, {
    onToken(index, text, logprob) {
      const chunk = shapes.piece(index, text, logprob);
      if (chunk) stream.push(chunk);
    },
    // The next iteration throws the AbortError, not the chunks still on their way.
    onAbort: () => stream.halt(),
  });
  run.result.then(
    (g) => {
      g.choices.forEach((_, i) => shapes.last(g, i, i === g.choices.length - 1).forEach((chunk) => stream.push(chunk)));
      if (options.stream_options?.include_usage === true) stream.push(shapes.usage(g));
      stream.end();
    },
    (error: RadixlmError) => stream.end(error),
  );
  return stream;
}

function chatLogprobs(logprobs: TokenLogprob[] | null): ChatLogprobs | null {
  return logprobs && { content: logprobs, refusal: null };
}

/** Ids for a reply's calls. */
function withIds(calls: { name: string; arguments: string }[]): ToolCall[] {
  return calls.map((c) => ({ id: `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`, type: "function", function: { name: c.name, arguments: c.arguments } }));
}

function chatMessage(c: GeneratedChoice): ChatChoice["message"] {
  return c.toolCalls ? { role: "assistant", content: null, tool_calls: withIds(c.toolCalls) } : { role: "assistant", content: c.text };
}

/**
 * A streamed choice that may be tool calls: a reply of calls opens with the model's call opener
 * (text may not, by the grammar), so the first character says which. Calls are held back and
 * given whole at the end; text streams, with log-probabilities held while nothing is shown.
 */
class ChatStreamChoice {
  private mode: "undecided" | "text" | "calls";
  private started = false;
  private held: TokenLogprob[] = [];

  /** `opener`: what a reply of calls starts with, null where the reply is text. */
  constructor(private readonly opener: string | null) {
    this.mode = opener === null ? "text" : "undecided";
  }

  /** The delta and log-probabilities to send for a piece, or null to send nothing yet. */
  piece(text: string, logprob: TokenLogprob | null): { delta: ChatDelta; logprobs: TokenLogprob[] } | null {
    if (this.mode === "undecided" && text !== "") this.mode = this.opener !== null && text.startsWith(this.opener) ? "calls" : "text";
    if (this.mode === "calls") return null;
    if (logprob) this.held.push(logprob);
    if (this.mode === "undecided" || (text === "" && !logprob)) return null;
    const delta: ChatDelta = this.started ? { content: text } : { role: "assistant", content: text };
    this.started = true;
    const logprobs = this.held;
    this.held = [];
    return { delta, logprobs };
  }

  /** The delta carrying a reply's calls. */
  calls(calls: ToolCall[]): ChatDelta {
    const tool_calls = calls.map((c, index) => ({ index, ...c }));
    return this.started ? { tool_calls } : { role: "assistant", tool_calls };
  }
}

/** `opener`: what a reply of calls starts with, null where the request allows no calls. */
function chatShapes(h: Head, opener: string | null): Shapes<ChatCompletion, ChatCompletionChunk> {
  const object = "chat.completion.chunk" as const;
  const streamed = new Map<number, ChatStreamChoice>();
  const choice = (index: number) => {
    const known = streamed.get(index);
    if (known) return known;
    const fresh = new ChatStreamChoice(opener);
    streamed.set(index, fresh);
    return fresh;
  };
  return {
    whole: (g) => ({
      ...h,
      object: "chat.completion",
      choices: mapChoices(g.choices, (c, index) => ({
        index,
        message: chatMessage(c),
        finish_reason: c.finishReason,
        logprobs: chatLogprobs(c.logprobs),
        tokens: c.tokens,
        top2_gaps: c.top2Gaps,
      })),
      ...extras(g),
    }),
    piece: (index, text, logprob) => {
      const shown = choice(index).piece(text, logprob);
      if (!shown) return null;
      const logprobs = shown.logprobs.length > 0 ? { logprobs: chatLogprobs(shown.logprobs) } : {};
      return { ...h, object, choices: [{ index, delta: shown.delta, finish_reason: null, ...logprobs }] };
    },
    last: (g, index, final) => {
      const c = g.choices[index]!;
      const chunks: ChatCompletionChunk[] = [];
      if (c.toolCalls) chunks.push({ ...h, object, choices: [{ index, delta: choice(index).calls(withIds(c.toolCalls)), finish_reason: null }] });
      const end: ChatCompletionChunk = { ...h, object, choices: [{ index, delta: {}, finish_reason: c.finishReason }], tokens: c.tokens, top2_gaps: c.top2Gaps };
      chunks.push(final ? { ...end, usage: usage(g), stats: g.stats } : end);
      return chunks;
    },
    usage: (g) => ({ ...h, object, choices: [], usage: usage(g) }),
  };
}

/** OpenAI's legacy log-probabilities of one choice's tokens, given in order (their text offsets counted as they come). */
class LegacyLogprobs {
  private readonly decoder = new TextDecoder();
  private offset = 0;

  of(logprobs: TokenLogprob[]): CompletionLogprobs {
    const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [], content: logprobs };
    for (const lp of logprobs) {
      out.tokens.push(lp.token);
      out.token_logprobs.push(lp.logprob);
      out.top_logprobs.push(Object.fromEntries(lp.top_logprobs.map((t) => [t.token, t.logprob])));
      out.text_offset.push(this.offset);
      this.offset += this.decoder.decode(Uint8Array.from(lp.bytes), { stream: true }).length;
    }
    return out;
  }
}

function completionShapes(h: Head): Shapes<Completion, CompletionChunk> {
  const object = "text_completion" as const;
  const streamed = new Map<number, LegacyLogprobs>();
  return {
    whole: (g) => ({
      ...h,
      object,
      choices: mapChoices(g.choices, (c, index) => ({
        index,
        text: c.text,
        finish_reason: c.finishReason,
        logprobs: c.logprobs && new LegacyLogprobs().of(c.logprobs),
        tokens: c.tokens,
        top2_gaps: c.top2Gaps,
      })),
      ...extras(g),
    }),
    piece: (index, text, logprob) => {
      if (!logprob) return { ...h, object, choices: [{ index, text, finish_reason: null }] };
      const legacy = streamed.get(index) ?? new LegacyLogprobs();
      streamed.set(index, legacy);
      return { ...h, object, choices: [{ index, text, finish_reason: null, logprobs: legacy.of([logprob]) }] };
    },
    last: (g, index, final) => {
      const c = g.choices[index]!;
      const chunk: CompletionChunk = { ...h, object, choices: [{ index, text: "", finish_reason: c.finishReason }], tokens: c.tokens, top2_gaps: c.top2Gaps };
      return [final ? { ...chunk, usage: usage(g), stats: g.stats } : chunk];
    },
    usage: (g) => ({ ...h, object, choices: [], usage: usage(g) }),
  };
}

class ChatCompletionsApi implements ChatCompletions {
  constructor(
    private readonly link: WorkerLink,
    private readonly info: ModelInfo,
  ) {}

  create(request: ChatCompletionRequest & { stream?: false | null }): Promise<ChatCompletion>;
  create(request: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
  create(request: ChatCompletionRequest): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
  async create(request: ChatCompletionRequest): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    const params = checkChatRequest(request);
    const calls = (params.tools?.length ?? 0) > 0 && params.tool_choice !== "none";
    return respond(this.link, params, request, chatShapes(head("chatcmpl", this.info.modelName), calls ? this.info.toolCallOpener : null));
  }
}

class CompletionsApi implements Completions {
  constructor(
    private readonly link: WorkerLink,
    private readonly model: string,
  ) {}

  create(request: CompletionRequest & { stream?: false | null }): Promise<Completion>;
  create(request: CompletionRequest & { stream: true }): Promise<AsyncIterable<CompletionChunk>>;
  create(request: CompletionRequest): Promise<Completion | AsyncIterable<CompletionChunk>>;
  async create(request: CompletionRequest): Promise<Completion | AsyncIterable<CompletionChunk>> {
    return respond(this.link, checkCompletionRequest(request), request, completionShapes(head("cmpl", this.model)));
  }
}

/** The Engine the page holds: every method is a call to the worker. */
class WorkerEngine implements Engine {
  readonly chat: { readonly completions: ChatCompletions };
  readonly completions: Completions;
  readonly cache: EngineCache;
  readonly debug: EngineDebug;

  constructor(
    private readonly link: WorkerLink,
    readonly info: ModelInfo,
  ) {
    this.chat = { completions: new ChatCompletionsApi(link, info) };
    this.completions = new CompletionsApi(link, info.modelName);
    this.cache = {
      // async, so that a malformed prefix rejects rather than throws
      pin: async (prefix) => link.call("pin", { prefix: checkPrefix(prefix) }),
      unpin: async (prefix) => link.call("unpin", { prefix: checkPrefix(prefix) }),
      stats: () => link.call("stats", {}),
      clear: () => link.call("clear", {}),
    };
    this.debug = {
      destroyDevice: () => link.call("destroyDevice", {}),
      wasmMemoryBytes: () => link.call("wasmMemoryBytes", {}),
      reloads: () => link.call("reloads", {}),
    };
  }

  dispose(): Promise<void> {
    return this.link.dispose();
  }
}
