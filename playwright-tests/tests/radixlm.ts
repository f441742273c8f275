// The public API of the `radixlm` package as these tests use it: its own types, from its sources,
// so a change to the package's API fails the type check here. At run time the tests import the
// built package in the page.

import type * as Radixlm from "../../pkg/src/index.js";

export type {
  CacheStats,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  ChatMessageParam,
  Completion,
  CompletionChunk,
  CompletionRequest,
  Engine,
  EngineOptions,
  FunctionTool,
  LoadProgress,
  PrefixToPin,
  ModelInfo,
  ResponseFormat,
} from "../../pkg/src/index.js";

/** The module the page imports; error classes are looked up on it by name. */
export type RadixlmModule = typeof Radixlm & { [errorClass: string]: unknown };

/** The error names the package defines (each one a class exported under that name). */
export type ErrorName =
  | "RadixlmError"
  | "WebGPUUnavailableError"
  | "NoAdapterError"
  | "AdapterLimitsError"
  | "ModelFetchError"
  | "ModelFormatError"
  | "GpuOutOfMemoryError"
  | "DeviceLostError"
  | "PromptTooLongError"
  | "InvalidRequestError"
  | "AbortError"
  | "EngineDisposedError"
  | "InternalError";
