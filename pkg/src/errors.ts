// One Error subclass per way a call can fail, each message saying what to do about it. Errors
// cross the worker boundary as plain objects ({ name, message, ...fields }) and are rebuilt here.

/** The base class of every error radixlm throws; `name` is the subclass's name. */
export class RadixlmError extends Error {
  override readonly name: string = "RadixlmError";
}

const WEBGPU_BROWSERS =
  "Chrome or Edge 113+ on desktop, Chrome 121+ on Android, Safari 26+ on iOS and macOS, or Firefox 141+ on Windows";

/** The browser has no WebGPU (`navigator.gpu` is missing), or the page is not a secure context. */
export class WebGPUUnavailableError extends RadixlmError {
  override readonly name: string = "WebGPUUnavailableError";
  constructor(
    message = globalThis.isSecureContext === false
      ? `WebGPU needs a secure context: serve this page over https or from localhost, in a browser with WebGPU (${WEBGPU_BROWSERS}).`
      : `This browser has no WebGPU (navigator.gpu is missing). Use ${WEBGPU_BROWSERS}, with hardware acceleration turned on.`,
  ) {
    super(message);
  }
}

/**
 * WebGPU is there but gives no GPU adapter (disabled, blocklisted, or a browser that exposes the
 * API without enabling it): for the user, no WebGPU, so it is a `WebGPUUnavailableError` too.
 */
export class NoAdapterError extends WebGPUUnavailableError {
  override readonly name = "NoAdapterError";
  /** What to do, appended to the engine's message. */
  static readonly advice =
    "Turn on hardware acceleration in the browser's settings, update the GPU driver, or try another browser or device.";
}

/** The GPU's WebGPU limits are too small for this model. */
export class AdapterLimitsError extends RadixlmError {
  override readonly name = "AdapterLimitsError";
  /** What to do, appended to the engine's message. */
  static readonly advice = "Use a smaller model, or a device with a more capable GPU.";
}

/** The model could not be downloaded: a network failure or an HTTP error status. */
export class ModelFetchError extends RadixlmError {
  override readonly name = "ModelFetchError";
  /** The model's URL. */
  readonly url: string;
  /** The HTTP status, when the server answered. */
  readonly status: number | undefined;
  constructor(message: string, fields: { url: string; status?: number | undefined }) {
    super(message);
    this.url = fields.url;
    this.status = fields.status;
  }
}

/** The file is not a GGUF model the engine can run (corrupt, truncated, or an unsupported kind). */
export class ModelFormatError extends RadixlmError {
  override readonly name = "ModelFormatError";
  /** What to do, appended to the GGUF reader's message. */
  static readonly advice =
    "Check that the URL or file is a whole GGUF model of a supported architecture in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K.";
}

/** The GPU ran out of memory. */
export class GpuOutOfMemoryError extends RadixlmError {
  override readonly name = "GpuOutOfMemoryError";
  /** What to do, appended to the engine's message. */
  static readonly advice = "Lower kvBudgetBytes or maxContext, use a smaller model, or close other tabs that use the GPU.";
}

/** The engine's worker ran out of memory (the CPU backend keeps weights and KV cache in wasm memory). */
export class OutOfMemoryError extends RadixlmError {
  override readonly name = "OutOfMemoryError";
  /** What to do, appended to the engine's message. */
  static readonly advice = "Lower kvBudgetBytes or maxContext, use a smaller model, or close other tabs.";
}

/** The GPU device was lost (the tab went to the background on a phone, or the driver reset). */
export class DeviceLostError extends RadixlmError {
  override readonly name = "DeviceLostError";
  /** What to do, appended to the engine's message. */
  static readonly advice = "Send the request again: the engine reloads the model onto a new device.";
}

/** The prompt and max_tokens do not fit the engine's context. */
export class PromptTooLongError extends RadixlmError {
  override readonly name = "PromptTooLongError";
  /** What to do, appended to the engine's message. */
  static readonly advice =
    "Shorten the prompt or drop early turns of the conversation, lower max_tokens, or create the engine with a larger maxContext.";
}

/** A request or option is malformed; the message names the field. */
export class InvalidRequestError extends RadixlmError {
  override readonly name = "InvalidRequestError";
  /** What to do, appended to the engine's message. */
  static readonly advice = "Fix that field of the request.";
}

/** How far an aborted request got. */
export interface AbortCounts {
  /** Prompt tokens whose KV was computed or reused before the request stopped. */
  promptTokensComputed: number;
  /** Tokens of the whole prompt (0 if the request was aborted before it started). */
  promptTokens: number;
  /** Tokens generated before the request stopped. */
  completionTokens: number;
  /** Engine steps that ran after the abort reached the engine: 0, or 1 (the one in flight). */
  stepsAfterAbort: number;
}

/** The request's AbortSignal fired, or its stream was closed early. */
export class AbortError extends RadixlmError implements AbortCounts {
  override readonly name = "AbortError";
  readonly promptTokensComputed: number;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly stepsAfterAbort: number;
  constructor(counts: AbortCounts, message = "The request was aborted: its AbortSignal fired or its stream was closed.") {
    super(message);
    this.promptTokensComputed = counts.promptTokensComputed;
    this.promptTokens = counts.promptTokens;
    this.completionTokens = counts.completionTokens;
    this.stepsAfterAbort = counts.stepsAfterAbort;
  }
}

/** The counts of a request aborted before the engine started it. */
export const NOT_STARTED: AbortCounts = { promptTokensComputed: 0, promptTokens: 0, completionTokens: 0, stepsAfterAbort: 0 };

/** The engine was disposed. */
export class EngineDisposedError extends RadixlmError {
  override readonly name = "EngineDisposedError";
  constructor(message = "This engine was disposed: create a new one with createEngine().") {
    super(message);
  }
}

/** A bug in radixlm, or the engine crashed; the message says whether reloading the page is needed. */
export class InternalError extends RadixlmError {
  override readonly name = "InternalError";
}

/** An error as it crosses the worker boundary. */
export interface WireError {
  name: string;
  message: string;
  [field: string]: unknown;
}

/** The plain-object form of an error, for postMessage. */
export function toWire(error: RadixlmError): WireError {
  return { ...error, name: error.name, message: error.message };
}

/** The errors rebuilt from their message alone. */
const BY_NAME = new Map<string, new (message: string) => RadixlmError>([
  ["WebGPUUnavailableError", WebGPUUnavailableError],
  ["NoAdapterError", NoAdapterError],
  ["AdapterLimitsError", AdapterLimitsError],
  ["ModelFormatError", ModelFormatError],
  ["GpuOutOfMemoryError", GpuOutOfMemoryError],
  ["OutOfMemoryError", OutOfMemoryError],
  ["DeviceLostError", DeviceLostError],
  ["PromptTooLongError", PromptTooLongError],
  ["InvalidRequestError", InvalidRequestError],
  ["EngineDisposedError", EngineDisposedError],
  ["InternalError", InternalError],
]);

const count = (value: unknown): number => (typeof value === "number" ? value : 0);

/** Rebuilds an error that crossed the worker boundary as its class; unknown names become InternalError. */
export function fromWire(wire: WireError): RadixlmError {
  switch (wire.name) {
    case "AbortError":
      return new AbortError(
        {
          promptTokensComputed: count(wire["promptTokensComputed"]),
          promptTokens: count(wire["promptTokens"]),
          completionTokens: count(wire["completionTokens"]),
          stepsAfterAbort: count(wire["stepsAfterAbort"]),
        },
        wire.message,
      );
    case "ModelFetchError":
      return new ModelFetchError(wire.message, {
        url: String(wire["url"]),
        status: typeof wire["status"] === "number" ? wire["status"] : undefined,
      });
  }
  const ErrorClass = BY_NAME.get(wire.name) ?? InternalError;
  return new ErrorClass(wire.message);
}

/** The wasm engine's error codes (the JS error's `name`) that have a class of their own. */
const ENGINE_ERRORS = new Map<string, (new (message: string) => RadixlmError) & { readonly advice: string }>([
  ["NoAdapterError", NoAdapterError],
  ["AdapterLimitsError", AdapterLimitsError],
  ["ModelFormatError", ModelFormatError],
  ["GpuOutOfMemoryError", GpuOutOfMemoryError],
  ["OutOfMemoryError", OutOfMemoryError],
  ["DeviceLostError", DeviceLostError],
  ["PromptTooLongError", PromptTooLongError],
  ["InvalidRequestError", InvalidRequestError],
]);

/** Ends a message with a full stop, so advice can follow it. */
function sentence(text: string): string {
  const trimmed = text.trim();
  return /[.!?]$/.test(trimmed) ? trimmed : `${trimmed}.`;
}

/**
 * The class for anything the worker caught: radixlm's own errors as they are, the wasm engine's
 * errors by their code with advice added, anything else (GpuError, EngineBusyError, a bug) as
 * InternalError.
 */
export function fromEngine(error: unknown): RadixlmError {
  if (error instanceof RadixlmError) return error;
  const name = error instanceof Error ? error.name : typeof error;
  const message = sentence(error instanceof Error ? error.message : String(error));
  const ErrorClass = ENGINE_ERRORS.get(name);
  if (ErrorClass) return new ErrorClass(`${message} ${ErrorClass.advice}`);
  return new InternalError(
    `Unexpected ${name} in the radixlm engine: ${message} This is a bug in radixlm; please report it. Reloading the page starts a fresh engine.`,
  );
}
