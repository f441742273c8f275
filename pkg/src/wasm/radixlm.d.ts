// The wasm-bindgen glue's surface (crate/src/wasm/), declared here so the package type-checks
// before the Rust build has written dist/wasm/. tsc emits nothing for this file; at run time
// dist/worker.js imports the real glue, dist/wasm/radixlm.js. Keep it in step with the crate.

/**
 * Instantiates the wasm module; call once before anything else. The threaded build
 * (dist/wasm-threads/, the same surface) makes its memory shared.
 */
export default function init(module_or_path?: { module_or_path: RequestInfo | URL }): Promise<unknown>;

/** Instantiates the threaded build's module on another thread's shared memory (a CPU thread). */
export function initSync(options: { module: WebAssembly.Module; memory: WebAssembly.Memory }): unknown;

/** A CPU thread's body: takes the engine's tasks until the engine is freed. `seat` is what spawn_thread was given. */
export function cpu_thread_run(seat: number): void;

/** Starts a CPU thread: a Web Worker that calls initSync({ module, memory }), then cpu_thread_run(seat). */
export type SpawnThread = (module: WebAssembly.Module, memory: WebAssembly.Memory, seat: number) => void;

/** Streams a GGUF file onto a backend. Errors are JS `Error`s whose `name` is an error code. */
export class WasmLoader {
  private constructor();
  /**
   * Opens the WebGPU adapter and device, or readies the CPU backend. total_bytes: the file's size if known.
   * options_json: JSON of { backend? ("webgpu" | "cpu"), threads? (the CPU's; more than 1 needs the
   * threaded build and spawn_thread), kv_budget_bytes?, max_batch?, max_context?, spill? ("q8" | "q4" | "off"), spill_budget_bytes? }.
   */
  static create(total_bytes: number | undefined, options_json: string, spawn_thread?: SpawnThread): Promise<WasmLoader>;
  /** Feeds the next bytes of the file, in order. Synchronous (queue writes only). */
  push(chunk: Uint8Array): void;
  /** Bytes of the file taken so far. */
  bytes_pushed(): number;
  /** After the last chunk: checks every tensor arrived, builds pipelines, returns the engine. */
  finish(): Promise<WasmEngine>;
  free(): void;
}

/** A loaded model. Only one request runs at a time; no call may overlap a pending step() or pin(). */
export class WasmEngine {
  private constructor();
  /** JSON: { model_name, architecture, n_layers, n_embd, vocab_size, n_ctx, max_context, page_size, adapter, backend ("webgpu" | "cpu"), threads, fingerprint }. */
  info(): string;
  /** Starts a chat request: JSON { messages, max_tokens?, temperature?, top_p?, top_k?, seed?, stop? }. */
  start_chat(request_json: string): void;
  /** Starts a raw text request: JSON { prompt, ...sampling }. */
  start_completion(request_json: string): void;
  /** Runs one prefill batch or one decoded token; resolves to a StepEvent JSON string. */
  step(): Promise<string>;
  /** Ends the current request between steps: its "done" event JSON (finish_reason "abort"), or "null". */
  abort(): string;
  /** JSON CacheStats (snake_case), with the spill tier's stats under "spill" (null when off) and "spill_note". */
  stats(): string;
  /** Pins a prefix, JSON { messages } or { text }; resolves to the pinned tokens. */
  pin(json: string): Promise<number>;
  /** Undoes one pin of the same prefix; false if it was not pinned. */
  unpin(json: string): boolean;
  /** Empties both tiers: cached prefixes not in use on the GPU (pinned ones too) and this model's IndexedDB records. */
  clear(): Promise<void>;
  /** Writes up to max_pages cached pages IndexedDB lacks to it, prefixes first; resolves to whether more remain. */
  write_behind(max_pages: number): Promise<boolean>;
  /** Test hook: GPUDevice.destroy() on the engine's device. */
  destroy_device_for_test(): void;
  /** true once the device is lost. */
  is_device_lost(): boolean;
  /** Why the device was lost; undefined if it was not (or while a step holds the engine). */
  device_lost_reason(): string | undefined;
  free(): void;
}

/** Bytes of the WebAssembly.Memory (its peak: it never shrinks). */
export function wasm_memory_bytes(): number;
