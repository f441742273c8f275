// radixlm: a language model on the GPU, in the browser, with an OpenAI-shaped API and a radix-tree
// prefix cache. The one entry point of the package.

export { createEngine, clearModelCache } from "./client.js";
export {
  RadixlmError,
  WebGPUUnavailableError,
  NoAdapterError,
  AdapterLimitsError,
  ModelFetchError,
  ModelFormatError,
  GpuOutOfMemoryError,
  OutOfMemoryError,
  DeviceLostError,
  PromptTooLongError,
  InvalidRequestError,
  AbortError,
  EngineDisposedError,
  InternalError,
} from "./errors.js";
export type { AbortCounts } from "./errors.js";
export type {
  CacheStats,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatCompletions,
  ChatMessage,
  Completion,
  CompletionChunk,
  CompletionRequest,
  Completions,
  DeviceLostEvent,
  Engine,
  EngineCache,
  EngineDebug,
  EngineOptions,
  FinishReason,
  GenerationStats,
  LoadProgress,
  LoadStage,
  MaskStats,
  ModelInfo,
  ResponseFormat,
  SamplingRequest,
  SpillStats,
  Usage,
} from "./types.js";
