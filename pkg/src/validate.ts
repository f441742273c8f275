// Checks requests and options on the page, before they reach the worker, so a mistake fails fast
// with an InvalidRequestError naming the field. The engine checks again what only it can know.

import { InvalidRequestError } from "./errors.js";
import type { ChatParams, CompletionParams, LoaderOptions, Prefix, SamplingParams, WireSource } from "./protocol.js";
import type { ChatCompletionRequest, ChatMessageParam, CompletionRequest, EngineOptions, FunctionTool, PrefixToPin, ResponseFormat, SamplingRequest, ToolChoice } from "./types.js";

const ROLES = new Set(["system", "user", "assistant", "tool"]);

function invalid(field: string, must: string, value: unknown): InvalidRequestError {
  const shown = typeof value === "string" || Array.isArray(value) ? JSON.stringify(value) : String(value);
  const got = shown.length > 60 ? `${shown.slice(0, 57)}...` : shown;
  return new InvalidRequestError(`${field} must be ${must} (got ${got}).`);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** A number field: unset (undefined or null) or passing `ok`. */
function number(field: string, value: unknown, must: string, ok: (n: number) => boolean): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || !ok(value)) throw invalid(field, must, value);
  return value;
}

const positiveInteger = (n: number) => Number.isSafeInteger(n) && n > 0;

/**
 * A conversation: a non-empty array of { role, content } with a known role and string content
 * (an assistant's that called tools may be null beside its `tool_calls`). The engine checks the
 * calls and a tool message's `tool_call_id`.
 */
export function checkMessages(messages: unknown, field = "messages", allowEmpty = false): ChatMessageParam[] {
  if (!Array.isArray(messages) || (messages.length === 0 && !allowEmpty)) throw invalid(field, "a non-empty array of messages", messages);
  return messages.map((message: unknown, i): ChatMessageParam => {
    if (!isObject(message)) throw invalid(`${field}[${i}]`, "an object { role, content }", message);
    const { role, content } = message;
    if (typeof role !== "string" || !ROLES.has(role)) throw invalid(`${field}[${i}].role`, '"system", "user", "assistant" or "tool"', role);
    const calls = role === "assistant" && message.tool_calls !== undefined;
    if (calls && !Array.isArray(message.tool_calls)) throw invalid(`${field}[${i}].tool_calls`, "an array of tool calls", message.tool_calls);
    if (typeof content !== "string" && !(calls && content === null)) throw invalid(`${field}[${i}].content`, "a string", content);
    return message as unknown as ChatMessageParam;
  });
}

/** Tools and the choice among them: their shapes; names, schemas and the choice's name the engine checks. */
function checkTools(request: ChatCompletionRequest): Pick<ChatParams, "tools" | "tool_choice" | "parallel_tool_calls"> {
  const { tools, tool_choice } = request;
  if (tools !== undefined && tools !== null && !(Array.isArray(tools) && tools.every(isObject))) throw invalid("tools", "an array of { type: \"function\", function }", tools);
  if (tool_choice !== undefined && tool_choice !== null && typeof tool_choice !== "string" && !isObject(tool_choice)) {
    throw invalid("tool_choice", '"auto", "none", "required" or { type: "function", function: { name } }', tool_choice);
  }
  return {
    tools: (tools ?? undefined) as FunctionTool[] | undefined,
    tool_choice: (tool_choice ?? undefined) as ToolChoice | undefined,
    parallel_tool_calls: flag("parallel_tool_calls", request.parallel_tool_calls ?? undefined),
  };
}

/** Fields every request may carry; the page's own (`signal`, `stream`, `stream_options`, `model`) stay here. */
const SAMPLING_FIELDS = [
  "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos", "response_format",
  "n", "frequency_penalty", "presence_penalty", "repetition_penalty", "penalty_last_n", "logit_bias",
  "signal", "stream", "stream_options", "model",
];
const CHAT_FIELDS = new Set([...SAMPLING_FIELDS, "messages", "logprobs", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls"]);
const COMPLETION_FIELDS = new Set([...SAMPLING_FIELDS, "prompt", "logprobs"]);

/** A field this API does not take is refused by name, never ignored (tools, functions, audio, ...). */
function knownFields(request: Record<string, unknown>, known: Set<string>): void {
  const unknown = Object.keys(request).filter((key) => !known.has(key) && request[key] !== undefined);
  if (unknown.length > 0) {
    throw new InvalidRequestError(`${unknown.map((k) => JSON.stringify(k)).join(", ")} ${unknown.length === 1 ? "is not a field" : "are not fields"} of this request (radixlm does not support ${unknown.length === 1 ? "it" : "them"}).`);
  }
}

/**
 * The sampling fields, passed on as given: the engine checks their types and ranges in one place
 * (RequestFields::sampling in crate/src/api), naming the field at fault, before it computes
 * anything. Only `stop` changes shape here: OpenAI's single string becomes a list.
 */
function checkSampling(request: SamplingRequest): SamplingParams {
  const stop = request.stop ?? undefined;
  return {
    max_tokens: request.max_tokens,
    max_completion_tokens: request.max_completion_tokens,
    temperature: request.temperature,
    top_p: request.top_p,
    top_k: request.top_k,
    seed: request.seed,
    stop: typeof stop === "string" ? [stop] : stop,
    ignore_eos: request.ignore_eos,
    response_format: responseFormat(request.response_format),
    n: request.n,
    frequency_penalty: request.frequency_penalty,
    presence_penalty: request.presence_penalty,
    repetition_penalty: request.repetition_penalty,
    penalty_last_n: request.penalty_last_n,
    logit_bias: request.logit_bias,
  };
}

function streamOptions(value: unknown): void {
  if (value === undefined || value === null) return;
  if (!isObject(value)) throw invalid("stream_options", "an object { include_usage }", value);
  knownFields(value, new Set(["include_usage"]));
  flag("stream_options.include_usage", value.include_usage ?? undefined);
}

const FORMATS = new Set(["text", "json_object", "json_schema", "grammar", "regex"]);

/** The format's shape; what is inside a schema, grammar or pattern the engine's compiler checks. */
function responseFormat(value: unknown): ResponseFormat | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isObject(value) || typeof value.type !== "string" || !FORMATS.has(value.type)) {
    throw invalid("response_format", 'an object whose type is "text", "json_object", "json_schema", "grammar" or "regex"', isObject(value) ? value.type : value);
  }
  if (value.type === "json_schema" && !(isObject(value.json_schema) && isObject(value.json_schema.schema))) {
    throw invalid("response_format.json_schema", "an object { name, schema }", value.json_schema);
  }
  return value as ResponseFormat;
}

function flag(field: string, value: unknown): boolean | undefined {
  if (value === undefined || typeof value === "boolean") return value;
  throw invalid(field, "true or false", value);
}

function checkRequest(request: unknown): asserts request is Record<string, unknown> {
  if (!isObject(request)) throw invalid("request", "an object", request);
}

/** A chat request as the engine takes it. */
export function checkChatRequest(request: ChatCompletionRequest): ChatParams {
  checkRequest(request);
  knownFields(request, CHAT_FIELDS);
  streamOptions(request.stream_options);
  return {
    ...checkSampling(request),
    messages: checkMessages(request.messages),
    ...checkTools(request),
    logprobs: request.logprobs,
    top_logprobs: request.top_logprobs,
  };
}

/** A text completion request as the engine takes it. */
export function checkCompletionRequest(request: CompletionRequest): CompletionParams {
  checkRequest(request);
  knownFields(request, COMPLETION_FIELDS);
  streamOptions(request.stream_options);
  if (typeof request.prompt !== "string") throw invalid("prompt", "a string", request.prompt);
  return {
    ...checkSampling(request),
    prompt: request.prompt,
    logprobs: request.logprobs,
  };
}

/** A prefix to pin: messages, raw text, or tools and the messages after them. */
export function checkPrefix(prefix: PrefixToPin): Prefix {
  if (typeof prefix === "string") return { text: prefix };
  if (Array.isArray(prefix)) return { messages: checkMessages(prefix, "prefix") };
  if (!isObject(prefix) || !Array.isArray(prefix.tools)) throw invalid("prefix", "messages, a string, or { tools, messages }", prefix);
  knownFields(prefix, new Set(["tools", "messages"]));
  return { tools: prefix.tools, messages: prefix.messages === undefined ? [] : checkMessages(prefix.messages, "prefix.messages", true) };
}

/** What createEngine sends the worker, and what it transfers. */
export interface LoadParams {
  source: WireSource;
  options: LoaderOptions;
  transfer: Transferable[];
}

/** IndexedDB bytes for spilled KV pages unless the options say otherwise. */
const DEFAULT_SPILL_BUDGET = 512 * 2 ** 20;

function backend(value: unknown): "auto" | "webgpu" | "cpu" {
  if (value === undefined) return "auto";
  if (value === "auto" || value === "webgpu" || value === "cpu") return value;
  throw invalid("backend", '"auto", "webgpu" or "cpu"', value);
}

function spillFormat(value: unknown): "q8" | "q4" | "off" {
  if (value === undefined) return "q8";
  if (value === "q8" || value === "q4" || value === "off") return value;
  throw invalid("spill", '"q8", "q4" or "off"', value);
}

/** Checks the options and resolves a URL against the page. */
export function checkEngineOptions(options: EngineOptions): LoadParams {
  if (!isObject(options)) throw invalid("options", "an object", options);
  const { model } = options;
  const loader: LoaderOptions = {
    backend: backend(options.backend),
    threads: number("threads", options.threads, "a positive integer", positiveInteger),
    kv_budget_bytes: number("kvBudgetBytes", options.kvBudgetBytes, "a positive integer", positiveInteger) ?? 256 << 20,
    max_batch: number("maxBatch", options.maxBatch, "a positive integer", positiveInteger) ?? 256,
    max_context: number("maxContext", options.maxContext, "a positive integer", positiveInteger),
    spill: spillFormat(options.spill),
    spill_budget_bytes: number("spillBudgetBytes", options.spillBudgetBytes, "a non-negative integer", (n) => Number.isInteger(n) && n >= 0) ?? DEFAULT_SPILL_BUDGET,
  };
  for (const name of ["onProgress", "onDeviceLost"] as const) {
    if (options[name] !== undefined && typeof options[name] !== "function") throw invalid(name, "a function", options[name]);
  }
  if (model instanceof ArrayBuffer) {
    // A buffer given to createEngine before was transferred away and reads as empty.
    if (model.byteLength === 0) throw invalid("model", "a non-empty ArrayBuffer (one passed to createEngine before is detached)", model);
    return { source: { kind: "bytes", bytes: model }, options: loader, transfer: [model] };
  }
  if (model instanceof Blob) return { source: { kind: "blob", blob: model }, options: loader, transfer: [] };
  if (typeof model !== "string" && !(model instanceof URL)) throw invalid("model", "a URL, an ArrayBuffer or a Blob", model);
  let url: URL;
  try {
    url = new URL(model, location.href);
  } catch {
    throw invalid("model", "a valid URL", model);
  }
  // The Cache API only holds http(s) requests (not blob: or data: URLs).
  const cache = options.cacheModel !== false && (url.protocol === "https:" || url.protocol === "http:");
  return { source: { kind: "url", url: url.href, cache }, options: loader, transfer: [] };
}
