// The engine's dedicated module worker. It owns the wasm engine and runs the page's calls on it
// one at a time, in order. A request runs as a sequence of awaited engine steps; messages that
// arrive meanwhile are only queued or recorded, because the engine stays borrowed while a step()
// or pin() promise is pending and any call into it would throw EngineBusyError. Aborts, cache
// stats and the device-loss test hook take effect between two steps.

import { cacheStats, generation, modelInfo } from "./engine_json.js";
import type { RequestResult, StepEvent } from "./engine_json.js";
import {
  AbortError,
  DeviceLostError,
  InternalError,
  NOT_STARTED,
  RadixlmError,
  WebGPUUnavailableError,
  fromEngine,
  toWire,
} from "./errors.js";
import type { AbortCounts } from "./errors.js";
import { modelSource, openModel } from "./model_source.js";
import type { ModelBytes, ModelSource } from "./model_source.js";
import type { Call, CallKind, FromWorker, Generation, LoaderOptions, ToWorker, WireDeviceLostEvent } from "./protocol.js";
import type { LoadProgress, ModelInfo } from "./types.js";
import { ThreadStarter, cpuThreads } from "./threads.js";
import type * as Glue from "./wasm/radixlm.js";
import type { WasmEngine, WasmLoader } from "./wasm/radixlm.js";

/** The worker's global scope. Typed here: the WebWorker lib cannot share a program with DOM. */
interface WorkerScope {
  onmessage: ((event: MessageEvent<ToWorker>) => void) | null;
  postMessage(message: FromWorker): void;
  addEventListener(type: "error", listener: (event: ErrorEvent) => void): void;
  addEventListener(type: "unhandledrejection", listener: (event: PromiseRejectionEvent) => void): void;
}

const scope = self as unknown as WorkerScope;

/** Calls answered at once: they do not touch the engine. */
type ImmediateKind = "wasmMemoryBytes" | "reloads";
type QueuedCall = Call<Exclude<CallKind, ImmediateKind>>;

/** A call waiting for, or holding, the engine. */
interface Job {
  call: QueuedCall;
  /** The page asked to abort it (a "generate"). */
  aborted: boolean;
  /** One of its step() promises is pending. */
  stepping: boolean;
  /** Steps that ran on after the abort arrived: the one in flight then, if any. */
  stepsAfterAbort: number;
  /** It streamed text to the page, so it can no longer be retried unseen. */
  emitted: boolean;
}

/**
 * What the worker uses of the glue: the same in both builds (one crate's surface, declarations
 * generated from it); only their init functions differ.
 */
type Surface = Pick<typeof Glue, "WasmLoader" | "wasm_memory_bytes">;

/** The wasm module's glue once instantiated: the threaded build, or the single-threaded one. */
let glue: Surface | undefined;

/** Instantiates the threaded build (shared memory) or the single-threaded one, once. */
async function loadGlue(threaded: boolean): Promise<Surface> {
  if (glue) return glue;
  // Literal paths, so that bundlers see both builds.
  const [module, wasm] = threaded
    ? [await import("./wasm-threads/radixlm.js"), new URL("./wasm-threads/radixlm_bg.wasm", import.meta.url)]
    : [await import("./wasm/radixlm.js"), new URL("./wasm/radixlm_bg.wasm", import.meta.url)];
  try {
    await module.default({ module_or_path: wasm });
  } catch (error) {
    throw new InternalError(
      `Could not load radixlm's wasm module from ${wasm.href} (${String(error)}). Serve dist/wasm/ and dist/wasm-threads/ next to dist/worker.js, the .wasm files as application/wasm.`,
    );
  }
  glue = module;
  return module;
}

/** Builds an engine from the model source, reporting each chunk's progress. */
async function buildEngine(source: ModelSource, options: Glue.LoadOptions, report: (progress: LoadProgress) => void = () => {}): Promise<WasmEngine> {
  const model = await openModel(source);
  try {
    return await upload(model, options, report);
  } catch (error) {
    // An unusable file must not stay in the cache, or every later load would fail on it.
    if (error instanceof Error && error.name === "ModelFormatError") await model.forget();
    throw error;
  }
}

/** Streams the model onto the backend and readies it (its pipelines, or its threads). */
async function upload(model: ModelBytes, options: Glue.LoadOptions, report: (progress: LoadProgress) => void): Promise<WasmEngine> {
  let loader: WasmLoader;
  const threads = new ThreadStarter();
  try {
    if (!glue) throw new InternalError("The wasm module is not loaded.");
    loader = await glue.WasmLoader.create(model.total, options, threads.spawn);
  } catch (error) {
    model.cancel();
    throw error;
  }
  try {
    let received = 0;
    for await (const chunk of model.chunks) {
      received += chunk.byteLength;
      if (model.fromNetwork) report({ stage: "download", loaded: received, total: model.total });
      loader.push(chunk);
      report({ stage: "upload", loaded: loader.bytes_pushed(), total: model.total });
    }
    // Without a Content-Length the size is known only now; the last events say it.
    if (model.total === undefined) {
      if (model.fromNetwork) report({ stage: "download", loaded: received, total: received });
      report({ stage: "upload", loaded: received, total: received });
    }
    report({ stage: "compile", loaded: 1, total: 1 });
    const engine = await loader.finish();
    try {
      await threads.ready();
    } catch (error) {
      engine.free();
      throw error;
    }
    return engine;
  } finally {
    loader.free();
  }
}

/** Pages one write-behind batch quantizes and stores: a few hundred KiB to a few MiB. */
const WRITE_BEHIND_PAGES = 8;

/** The options with the spill budget capped at half of what the origin may store. */
/**
 * The backend "auto" means here: WebGPU on a hardware adapter; the CPU without WebGPU, without
 * an adapter, or on a software adapter (SwiftShader, llvmpipe: `isFallbackAdapter`, or their
 * names in the adapter's info), where the CPU backend is faster. An explicit "webgpu" without
 * WebGPU is WebGPUUnavailableError.
 */
async function resolveBackend(asked: LoaderOptions["backend"]): Promise<"webgpu" | "cpu"> {
  if (asked === "cpu") return "cpu";
  if (!navigator.gpu) {
    if (asked === "webgpu") throw new WebGPUUnavailableError();
    return "cpu";
  }
  if (asked === "webgpu") return "webgpu";
  const adapter = await navigator.gpu.requestAdapter().catch(() => null);
  return adapter && !isSoftwareAdapter(adapter) ? "webgpu" : "cpu";
}

/** An adapter that runs WebGPU on the CPU. */
function isSoftwareAdapter(adapter: GPUAdapter): boolean {
  const legacy = adapter as GPUAdapter & { isFallbackAdapter?: boolean };
  const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
  if (legacy.isFallbackAdapter === true || info?.isFallbackAdapter === true) return true;
  const names = [info?.vendor, info?.architecture, info?.device, info?.description].join(" ");
  return /swiftshader|llvmpipe|lavapipe|software|microsoft basic render/i.test(names);
}

async function withinQuota(options: Glue.LoadOptions): Promise<Glue.LoadOptions> {
  const budget = options.spill_budget_bytes;
  if (options.spill === "off" || budget === undefined || budget === null) return options;
  const estimate = await navigator.storage?.estimate?.().catch(() => undefined);
  const quota = estimate?.quota;
  return quota === undefined ? options : { ...options, spill_budget_bytes: Math.min(budget, Math.floor(quota / 2)) };
}

/** How far a request's prompt got: the last prefill event's count, and whether tokens flow. */
interface PromptProgress {
  /** Prompt tokens with KV after the last prefill step, the reused prefix included. */
  prefilled: number | undefined;
  /** A token came: the whole prompt has KV. */
  flowing: boolean;
}

/** How far a request got when it was aborted; `done` is its final event (null: none was running). */
function abortCounts(job: Job, done: RequestResult | null, prompt: PromptProgress): AbortCounts {
  if (!done) return { ...NOT_STARTED, stepsAfterAbort: job.stepsAfterAbort };
  const { prompt_tokens, completion_tokens, cached_tokens } = done.usage;
  // Before its first prefill step a request has the KV of its reused prefix only.
  const whole = prompt.flowing || done.finish_reason !== "abort";
  return {
    promptTokensComputed: whole ? prompt_tokens : (prompt.prefilled ?? cached_tokens),
    promptTokens: prompt_tokens,
    completionTokens: completion_tokens,
    stepsAfterAbort: job.stepsAfterAbort,
  };
}

/** How long a GPU error waits for the device's loss to be reported before it counts as itself. */
const LOSS_SETTLE_MS = 200;

/**
 * Whether `error` comes from a lost device. A failed readback is often the first sign of a loss
 * that the browser reports a moment later (the device's `lost` promise settles after the map's
 * rejection), so a GPU error waits briefly for that report.
 */
async function isDeviceLost(error: unknown, engine: WasmEngine): Promise<boolean> {
  if (error instanceof RadixlmError || error instanceof WebAssembly.RuntimeError) return false;
  if (error instanceof Error && error.name === "DeviceLostError") return true;
  if (error instanceof Error && error.name === "GpuError") {
    for (let waited = 0; waited < LOSS_SETTLE_MS && !engine.is_device_lost(); waited += 10) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
  return engine.is_device_lost();
}

/** Runs the page's calls on the engine. */
class Driver {
  private engine: WasmEngine | undefined;
  /** What the engine is built from, kept to rebuild it after a lost device. */
  private model: { source: ModelSource; options: Glue.LoadOptions } | undefined;
  private reloads = 0;
  /** Why the engine's device was lost, from when that is noticed until a new engine is built. */
  private lost: string | undefined;
  private readonly queue: Job[] = [];
  private current: Job | undefined;
  private pumping = false;
  /** A step() or pin() promise is pending: the engine is borrowed and must not be called. */
  private busy = false;
  /** stats and destroyDevice calls waiting for the engine to be free (at most one step away). */
  private readonly deferred: Call<"stats" | "destroyDevice">[] = [];
  /** The wasm module died (a panic); nothing runs any more. */
  private crashed = false;
  /** The GPU holds cached pages IndexedDB may lack: written behind while the queue is empty. */
  private unsaved = false;

  receive(message: ToWorker): void {
    if (this.crashed) return;
    switch (message.kind) {
      case "abort":
        return this.abort(message.id);
      case "wasmMemoryBytes":
        return this.reply(message.id, () => glue?.wasm_memory_bytes() ?? 0);
      case "reloads":
        return this.reply(message.id, () => this.reloads);
      case "stats":
      case "destroyDevice":
        this.deferred.push(message);
        return this.runDeferred();
      case "dispose":
        // The page has already rejected everything else; the running job stops at its next step.
        this.queue.length = 0;
        if (this.current) this.current.aborted = true;
        return this.enqueue(message);
      default:
        return this.enqueue(message);
    }
  }

  /** Reports the module's death to the page, once: every pending call is over. */
  crash(detail: unknown): void {
    if (this.crashed) return;
    this.crashed = true;
    const error = new InternalError(
      `The radixlm engine crashed (${String(detail)}); the console has the details. Reload the page to start it again.`,
    );
    this.post({ kind: "fatal", error: toWire(error) });
  }

  private post(message: FromWorker): void {
    scope.postMessage(message);
  }

  private reply(id: number, answer: () => unknown): void {
    try {
      this.post({ kind: "return", id, value: answer() });
    } catch (error) {
      this.fail(id, error);
    }
  }

  private fail(id: number, error: unknown): void {
    // A trap means the module is dead, whatever call it surfaced in.
    if (error instanceof WebAssembly.RuntimeError) return this.crash(error);
    this.post({ kind: "throw", id, error: toWire(fromEngine(error)) });
  }

  private abort(id: number): void {
    const queued = this.queue.findIndex((job) => job.call.id === id);
    if (queued >= 0) {
      this.queue.splice(queued, 1);
      return this.fail(id, new AbortError(NOT_STARTED));
    }
    const job = this.current;
    if (job?.call.id !== id || job.aborted) return;
    job.aborted = true;
    // The step in flight, if any, runs on; no step starts after this.
    job.stepsAfterAbort = job.stepping ? 1 : 0;
  }

  /** Answers the deferred calls if the engine is free. */
  private runDeferred(): void {
    if (this.busy) return;
    for (const call of this.deferred.splice(0)) {
      const engine = this.engine;
      // No engine (dropped after a lost device): the call waits its turn, which rebuilds it.
      if (!engine) this.enqueue(call);
      else this.reply(call.id, () => (call.kind === "stats" ? cacheStats(engine.stats()) : engine.destroy_device_for_test()));
    }
  }

  private enqueue(call: QueuedCall): void {
    this.queue.push({ call, aborted: false, stepping: false, stepsAfterAbort: 0, emitted: false });
    void this.pump();
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    for (let job = this.queue.shift(); job && !this.crashed; job = this.queue.shift()) {
      this.current = job;
      try {
        this.post({ kind: "return", id: job.call.id, value: await this.run(job) });
      } catch (error) {
        this.fail(job.call.id, error);
      }
      if (job.call.kind === "generate" || job.call.kind === "pin") this.unsaved = true;
      if (this.unsaved && this.queue.length === 0) await this.writeBehind();
    }
    this.current = undefined;
    this.pumping = false;
  }

  /**
   * Writes the new cached pages to IndexedDB in small batches, after the reply went out and only
   * while no call waits: a request never waits for its own pages, at most for one batch.
   */
  private async writeBehind(): Promise<void> {
    const engine = this.engine;
    this.unsaved = false;
    if (!engine || engine.is_device_lost()) return;
    try {
      while (await this.exclusive(() => engine.write_behind(WRITE_BEHIND_PAGES))) {
        if (this.queue.length > 0) {
          this.unsaved = true;
          return;
        }
      }
    } catch (error) {
      // Store failures are counted in the cache stats; a lost device is the next call's to handle.
      if (error instanceof WebAssembly.RuntimeError) this.crash(error);
    }
  }

  private run(job: Job): Promise<unknown> {
    const { call } = job;
    switch (call.kind) {
      case "load":
        return this.load(call);
      case "generate":
        return this.generate(job, call);
      case "pin":
        return this.withEngine(job, (engine) => this.exclusive(() => engine.pin(call.prefix)));
      case "unpin":
        return this.withEngine(job, (engine) => engine.unpin(call.prefix));
      case "clear":
        return this.withEngine(job, (engine) => this.exclusive(() => engine.clear()));
      case "stats":
        return this.withEngine(job, (engine) => cacheStats(engine.stats()));
      case "destroyDevice":
        return this.withEngine(job, (engine) => engine.destroy_device_for_test());
      case "dispose":
        this.drop();
        return Promise.resolve();
    }
  }

  private async load(call: Call<"load">): Promise<ModelInfo> {
    const backend = await resolveBackend(call.options.backend);
    const threads = backend === "cpu" ? cpuThreads(call.options.threads ?? undefined) : 1;
    await loadGlue(threads > 1);
    const options = await withinQuota({ ...call.options, backend, threads });
    this.model = { source: modelSource(call.source), options };
    this.engine = await buildEngine(this.model.source, options, (progress) =>
      this.post({ kind: "progress", id: call.id, progress }),
    );
    return modelInfo(this.engine.info());
  }

  /** The engine, rebuilt from the kept source (the Cache API or the Blob) if its device was lost. */
  private async ready(): Promise<WasmEngine> {
    if (this.engine) {
      const lost = this.engine.device_lost_reason();
      if (lost === undefined) return this.engine;
      this.dropLost(lost);
    }
    if (!this.model) throw new InternalError("No model is loaded: createEngine() did not finish.");
    const reason = this.lost ?? "the engine was dropped";
    this.notify({ state: "reloading", reason });
    try {
      this.engine = await buildEngine(this.model.source, this.model.options, (progress) =>
        this.notify({ state: "reloading", reason, progress }),
      );
    } catch (error) {
      this.notify({ state: "failed", reason, error: toWire(fromEngine(error)) });
      throw error;
    }
    this.lost = undefined;
    this.reloads++;
    this.notify({ state: "ready", reason });
    return this.engine;
  }

  private notify(event: WireDeviceLostEvent): void {
    this.post({ kind: "deviceLost", event });
  }

  private drop(): void {
    this.engine?.free();
    this.engine = undefined;
  }

  /** Drops an engine whose device is gone, remembering why for the reload's events. */
  private dropLost(reason: string): void {
    this.lost = reason;
    this.drop();
  }

  /**
   * Moves to a new device as soon as a loss is seen while idle (a browser may take the GPU from
   * a background tab), so the model is back before the user's next request rather than after it.
   */
  watchDevice(): void {
    if (this.pumping || this.busy || this.crashed || !this.engine?.is_device_lost()) return;
    this.pumping = true;
    void this.ready()
      .catch(() => {}) // told to the page as a "failed" event; the next call tries again
      .finally(() => {
        this.pumping = false;
        if (this.queue.length > 0) void this.pump();
      });
  }

  /**
   * Runs `use` on a working engine. If the device is lost meanwhile, the engine is dropped (the
   * next call rebuilds it) and `use` is retried once on a new one, unless it already streamed.
   */
  private async withEngine<T>(job: Job, use: (engine: WasmEngine) => T | Promise<T>): Promise<T> {
    for (let retried = false; ; retried = true) {
      const engine = await this.ready();
      try {
        return await use(engine);
      } catch (error) {
        if (!(await isDeviceLost(error, engine))) throw error;
        this.dropLost(engine.device_lost_reason() ?? (error instanceof Error ? error.message : String(error)));
        if (retried || job.emitted) {
          const cause = error instanceof Error ? error.message : String(error);
          throw new DeviceLostError(`The GPU device was lost (${cause}). ${DeviceLostError.advice}`);
        }
      }
    }
  }

  /** Awaits a call that borrows the engine; the deferred calls run as soon as it is free again. */
  private async exclusive<T>(call: () => Promise<T>): Promise<T> {
    this.busy = true;
    try {
      return await call();
    } finally {
      this.busy = false;
      this.runDeferred();
    }
  }

  private async step(engine: WasmEngine, job: Job): Promise<StepEvent> {
    job.stepping = true;
    try {
      return await this.exclusive(() => engine.step());
    } finally {
      job.stepping = false;
      await nextTask();
    }
  }

  private generate(job: Job, call: Call<"generate">): Promise<Generation> {
    const chat = "messages" in call.request;
    return this.withEngine(job, async (engine) => {
      if (job.aborted) throw new AbortError({ ...NOT_STARTED, stepsAfterAbort: job.stepsAfterAbort });
      if (chat) engine.start_chat(call.request);
      else engine.start_completion(call.request);
      const prompt: PromptProgress = { prefilled: undefined, flowing: false };
      for (;;) {
        if (job.aborted) throw new AbortError(abortCounts(job, engine.abort(), prompt));
        const event = await this.step(engine, job);
        if (event.type === "prefill") {
          prompt.prefilled = event.done;
        } else if (event.type === "token") {
          prompt.flowing = true;
          if (call.stream && (event.text !== "" || event.logprob)) {
            this.post({ kind: "token", id: call.id, index: event.index, text: event.text, logprob: event.logprob });
            job.emitted = true;
          }
        } else if (event.type === "choice_done") {
          // The next choice decodes from the same prompt pages.
        } else if (job.aborted || event.finish_reason === "abort") {
          throw new AbortError(abortCounts(job, event, prompt));
        } else {
          return generation(event);
        }
      }
    });
  }
}

/**
 * Resolves in a task of its own, after the page's messages already queued (an abort, a stats call)
 * have been delivered. A step on the CPU backend settles within one task, its promise by
 * microtasks alone: without this turn a request would run to its end before an abort could land.
 * A MessageChannel turn, not setTimeout, which browsers clamp to 4 ms when nested.
 */
const nextTask: () => Promise<void> = (() => {
  const channel = new MessageChannel();
  const waiting: (() => void)[] = [];
  channel.port1.onmessage = () => waiting.shift()?.();
  return () =>
    new Promise<void>((resolve) => {
      waiting.push(resolve);
      channel.port2.postMessage(null);
    });
})();

/** How often an idle worker checks its GPU device (a flag read: cheap). */
const DEVICE_WATCH_MS = 1000;

const driver = new Driver();
scope.onmessage = (event) => driver.receive(event.data);
setInterval(() => driver.watchDevice(), DEVICE_WATCH_MS);
// A wasm panic (logged to the console by the crate's panic hook) surfaces as an uncaught trap,
// often inside a future, where no pending promise will ever settle: report it to the page.
scope.addEventListener("error", (event) => {
  event.preventDefault();
  driver.crash(event.error ?? event.message);
});
scope.addEventListener("unhandledrejection", (event) => driver.crash(event.reason));
