// Checks requests and options on the page, before they reach the worker, so a mistake fails fast
// with an InvalidRequestError naming the field. The engine checks again what only it can know.

import { InvalidRequestError } from "./errors.js";
import type { ChatParams, CompletionParams, LoaderOptions, Prefix, SamplingParams, WireSource } from "./protocol.js";
import type { ChatCompletionRequest, ChatMessage, CompletionRequest, EngineOptions, ResponseFormat, SamplingRequest } from "./types.js";

const ROLES = new Set(["system", "user", "assistant"]);

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
const naturalNumber = (n: number) => Number.isSafeInteger(n) && n >= 0;

/** A conversation: a non-empty array of { role, content } with a known role and string content. */
export function checkMessages(messages: unknown, field = "messages"): ChatMessage[] {
  if (!Array.isArray(messages) || messages.length === 0) throw invalid(field, "a non-empty array of messages", messages);
  return messages.map((message: unknown, i): ChatMessage => {
    if (!isObject(message)) throw invalid(`${field}[${i}]`, "an object { role, content }", message);
    const { role, content } = message;
    if (typeof role !== "string" || !ROLES.has(role)) throw invalid(`${field}[${i}].role`, '"system", "user" or "assistant"', role);
    if (typeof content !== "string") throw invalid(`${field}[${i}].content`, "a string", content);
    return { role: role as ChatMessage["role"], content };
  });
}

function checkSampling(request: SamplingRequest): SamplingParams {
  const stop = request.stop ?? undefined;
  const stops = typeof stop === "string" ? [stop] : stop;
  if (stops !== undefined && (!Array.isArray(stops) || stops.some((s) => typeof s !== "string" || s === ""))) {
    throw invalid("stop", "a non-empty string or an array of them", stop);
  }
  return {
    max_tokens: number("max_tokens", request.max_tokens, "a positive integer", positiveInteger),
    temperature: number("temperature", request.temperature, "a number >= 0", (n) => n >= 0),
    top_p: number("top_p", request.top_p, "a number in (0, 1]", (n) => n > 0 && n <= 1),
    top_k: number("top_k", request.top_k, "an integer >= 0", naturalNumber),
    seed: number("seed", request.seed, "an integer >= 0", naturalNumber),
    stop: stops,
    ignore_eos: flag("ignore_eos", request.ignore_eos),
    response_format: responseFormat(request.response_format),
  };
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
  return { ...checkSampling(request), messages: checkMessages(request.messages) };
}

/** A text completion request as the engine takes it. */
export function checkCompletionRequest(request: CompletionRequest): CompletionParams {
  checkRequest(request);
  if (typeof request.prompt !== "string") throw invalid("prompt", "a string", request.prompt);
  return { ...checkSampling(request), prompt: request.prompt };
}

/** A prefix to pin: messages, or raw text. */
export function checkPrefix(prefix: ChatMessage[] | string): Prefix {
  return typeof prefix === "string" ? { text: prefix } : { messages: checkMessages(prefix, "prefix") };
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
