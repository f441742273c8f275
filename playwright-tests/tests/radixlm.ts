// The public API of the `radixlm` package as these tests use it (the contract the package is
// written to). The tests import the real package in the page at run time; these declarations
// only type the code that runs there, so a mismatch shows up as a failing test, not here.

export type LoadStage = "download" | "upload" | "compile";
export interface LoadProgress {
  stage: LoadStage;
  loaded: number;
  total: number | undefined;
}

export interface EngineOptions {
  model: string | URL | ArrayBuffer | Blob;
  kvBudgetBytes?: number;
  maxBatch?: number;
  maxContext?: number;
  onProgress?: (p: LoadProgress) => void;
  cacheModel?: boolean;
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface SamplingRequest {
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
  stop?: string | string[];
  signal?: AbortSignal;
  stream?: boolean | null;
}
export interface ChatCompletionRequest extends SamplingRequest {
  messages: ChatMessage[];
  model?: string;
}
export interface CompletionRequest extends SamplingRequest {
  prompt: string;
  model?: string;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}
export type FinishReason = "stop" | "length" | "abort";

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: [{ index: 0; message: { role: "assistant"; content: string }; finish_reason: FinishReason; logprobs: null }];
  usage: Usage;
  stats: Record<string, number>;
  tokens: number[];
}
export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: [{ index: 0; delta: { role?: "assistant"; content?: string }; finish_reason: FinishReason | null }];
  usage?: Usage;
  stats?: Record<string, number>;
  tokens?: number[];
}
export interface Completion {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: [{ index: 0; text: string; finish_reason: FinishReason; logprobs: null }];
  usage: Usage;
  stats: Record<string, number>;
  tokens: number[];
}
export interface CompletionChunk {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: [{ index: 0; text: string; finish_reason: FinishReason | null }];
  usage?: Usage;
  stats?: Record<string, number>;
  tokens?: number[];
}

export interface CacheStats {
  pageSize: number;
  totalPages: number;
  freePages: number;
  cachedPages: number;
  pinnedPages: number;
  lockedPages: number;
  tokensReused: number;
  requests: number;
  [more: string]: unknown;
}

export interface ModelInfo {
  [field: string]: unknown;
}

export interface Engine {
  readonly info: ModelInfo;
  readonly chat: {
    completions: {
      create(req: ChatCompletionRequest & { stream?: false | null }): Promise<ChatCompletion>;
      create(req: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
    };
  };
  readonly completions: {
    create(req: CompletionRequest & { stream?: false | null }): Promise<Completion>;
    create(req: CompletionRequest & { stream: true }): Promise<AsyncIterable<CompletionChunk>>;
  };
  readonly cache: {
    pin(prefix: ChatMessage[] | string): Promise<number>;
    unpin(prefix: ChatMessage[] | string): Promise<boolean>;
    stats(): Promise<CacheStats>;
    clear(): Promise<void>;
  };
  readonly debug: {
    destroyDevice(): Promise<void>;
    wasmMemoryBytes(): Promise<number>;
    reloads(): Promise<number>;
  };
  dispose(): Promise<void>;
}

/** The module `pkg/dist/index.js` as a page imports it. */
export interface RadixlmModule {
  createEngine(options: EngineOptions): Promise<Engine>;
  clearModelCache(): Promise<void>;
  RadixlmError: new (...args: never[]) => Error;
  [errorClass: string]: unknown;
}

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
