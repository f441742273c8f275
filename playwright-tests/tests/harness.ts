// Typed steps a test takes in the harness page: each wraps one page.evaluate that imports the
// real package from the dev server and calls its public API. Engines stay on `window.rx` between
// calls, under the id their handle carries.
//
// Functions passed to page.evaluate are serialised and run in the page: they may use only their
// arguments and what the page has (window.rx, installed by installPageGlobals below).

import { expect, type Page } from "@playwright/test";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  CacheStats,
  Completion,
  CompletionChunk,
  CompletionRequest,
  Engine,
  EngineOptions,
  LoadProgress,
  ModelInfo,
  PrefixToPin,
  RadixlmModule,
} from "./radixlm";

/** Where the page imports the package from (scripts/serve.mjs serves pkg/ under /pkg/). */
export const PACKAGE_URL = "/pkg/dist/index.js";
export const HARNESS_PATH = "/harness/";

/** An error as it reached the page's code: its class, message and own fields. */
export interface ErrorInfo {
  name: string;
  message: string;
  /** `instanceof RadixlmError` (the package's base class). */
  isRadixlmError: boolean;
  /** `instanceof` the class the package exports under `name`. */
  isNamedClass: boolean;
  /** `instanceof WebGPUUnavailableError` (no WebGPU, or WebGPU without an adapter). */
  isWebGPUUnavailable: boolean;
  /** Own enumerable number/string/boolean fields (AbortError's counters, an HTTP status, ...). */
  fields: Record<string, number | string | boolean>;
  stack: string;
}

export type Outcome<T> = { ok: true; value: T } | { ok: false; error: ErrorInfo };

interface HarnessGlobals {
  packageUrl: string;
  engines: Record<string, Engine>;
  nextId: number;
  module(): Promise<RadixlmModule>;
  engine(id: string): Engine;
  describe(error: unknown, mod?: RadixlmModule): ErrorInfo;
}

declare global {
  interface Window {
    rx: HarnessGlobals;
  }
}

/** Runs in every document of the page (an init script), before the page's own scripts. */
function installPageGlobals(packageUrl: string): void {
  let mod: Promise<RadixlmModule> | null = null;
  window.rx = {
    packageUrl,
    engines: {},
    nextId: 1,
    module() {
      // A string variable, not a literal: the package is only there at run time.
      mod ??= import(packageUrl) as Promise<RadixlmModule>;
      return mod;
    },
    engine(id) {
      const e = window.rx.engines[id];
      if (!e) throw new Error(`no engine "${id}" in this page (was it reloaded?)`);
      return e;
    },
    describe(error, m) {
      const e = error instanceof Error ? error : new Error(String(error));
      const fields: Record<string, number | string | boolean> = {};
      for (const [k, v] of Object.entries(e)) {
        if (typeof v === "number" || typeof v === "string" || typeof v === "boolean") fields[k] = v;
      }
      const named = m?.[e.name];
      return {
        name: e.name,
        message: e.message,
        isRadixlmError: !!m && e instanceof m.RadixlmError,
        isNamedClass: typeof named === "function" && e instanceof (named as new () => Error),
        isWebGPUUnavailable: !!m && e instanceof m.WebGPUUnavailableError,
        fields,
        stack: e.stack ?? "",
      };
    },
  };
}

/** Makes every document `page` loads from now on carry window.rx (reloads included). */
export async function preparePage(page: Page): Promise<void> {
  await page.addInitScript(installPageGlobals, PACKAGE_URL);
}

/** Opens the blank harness page. */
export async function openHarness(page: Page): Promise<void> {
  await page.goto(HARNESS_PATH);
  await expect(page.getByRole("heading", { name: "radixlm test harness" })).toBeVisible();
  await page.waitForFunction(() => typeof window.rx === "object");
}

/** Throws an Error carrying the page error's name and message (for steps expected to succeed). */
export function unwrap<T>(outcome: Outcome<T>, what: string): T {
  if (outcome.ok) return outcome.value;
  const err = new Error(`${what} failed with ${outcome.error.name}: ${outcome.error.message}\n--- in the page:\n${outcome.error.stack}`);
  err.name = outcome.error.name;
  throw err;
}

/** The serialisable part of EngineOptions: the model is a URL, resolved against the page. */
export type LoadOptions = Omit<EngineOptions, "model" | "onProgress"> & {
  model: string;
  /** Fetch the URL in the page and hand the engine an ArrayBuffer of it instead. */
  as?: "url" | "arraybuffer" | "blob";
};

export interface Loaded {
  engine: EngineHandle;
  progress: LoadProgress[];
  info: ModelInfo;
}

/**
 * createEngine in the page, collecting every progress event in order. The backend is WebGPU
 * unless the options say otherwise: the suites written for the GPU path keep testing it on
 * SwiftShader, where "auto" would take the CPU.
 */
export async function tryLoadEngine(page: Page, options: LoadOptions): Promise<{ outcome: Outcome<Loaded>; progress: LoadProgress[] }> {
  const r = await page.evaluate(async ({ as, ...opts }) => {
    const rx = window.rx;
    const mod = await rx.module();
    const progress: LoadProgress[] = [];
    let model: EngineOptions["model"] = opts.model;
    if (as === "arraybuffer" || as === "blob") {
      const res = await fetch(opts.model);
      model = as === "blob" ? await res.blob() : await res.arrayBuffer();
    }
    try {
      const engine = await mod.createEngine({ ...opts, model, onProgress: (p) => progress.push({ ...p }) });
      const id = `engine-${rx.nextId++}`;
      rx.engines[id] = engine;
      // A round trip through JSON drops anything that would not survive the evaluate boundary.
      return { ok: true as const, id, info: JSON.parse(JSON.stringify(engine.info)) as ModelInfo, progress };
    } catch (e) {
      return { ok: false as const, error: rx.describe(e, mod), progress };
    }
  }, { backend: "webgpu" as const, ...options });
  if (!r.ok) return { outcome: { ok: false, error: r.error }, progress: r.progress };
  const loaded = { engine: new EngineHandle(page, r.id), progress: r.progress, info: r.info };
  return { outcome: { ok: true, value: loaded }, progress: r.progress };
}

export async function loadEngine(page: Page, options: LoadOptions): Promise<Loaded> {
  return unwrap((await tryLoadEngine(page, options)).outcome, `createEngine(${options.model})`);
}

/** A request aborted on a timer. */
export interface AbortedRun<T> {
  /** How it ended; null if it had not ended `settleWithinMs` after the abort. */
  outcome: Outcome<T> | null;
  /** When the abort was called, after create(). */
  abortedAfterMs: number;
  /** How long after the abort the request ended (null: it had not). */
  endedAfterAbortMs: number | null;
}

/** What a stream gave before it ended (or threw). */
export interface StreamResult<C> {
  chunks: C[];
  /** The error the iteration threw, null when it ended normally. */
  error: ErrorInfo | null;
  /** Chunks that arrived after controller.abort() was called. */
  chunksAfterAbort: number;
}

type Kind = "chat" | "completion";
type RequestOf<K extends Kind> = K extends "chat" ? ChatCompletionRequest : CompletionRequest;
type ResponseOf<K extends Kind> = K extends "chat" ? ChatCompletion : Completion;
type ChunkOf<K extends Kind> = K extends "chat" ? ChatCompletionChunk : CompletionChunk;
type Serialisable<R> = Omit<R, "signal" | "stream">;

/** An engine living in the page. */
export class EngineHandle {
  constructor(
    readonly page: Page,
    readonly id: string,
  ) {}

  chat(req: Serialisable<ChatCompletionRequest>): Promise<ChatCompletion> {
    return this.run("chat", req).then((o) => unwrap(o, "chat.completions.create"));
  }

  complete(req: Serialisable<CompletionRequest>): Promise<Completion> {
    return this.run("completion", req).then((o) => unwrap(o, "completions.create"));
  }

  tryChat(req: Serialisable<ChatCompletionRequest>): Promise<Outcome<ChatCompletion>> {
    return this.run("chat", req);
  }

  tryComplete(req: Serialisable<CompletionRequest>): Promise<Outcome<Completion>> {
    return this.run("completion", req);
  }

  /**
   * A non-stream request whose AbortController is aborted `abortAfterMs` after create() is called.
   * Waits at most `settleWithinMs` after the abort for the request to end: `outcome` is null if
   * it had not by then (the page stops waiting; the request may still be running in the engine).
   */
  chatAbortedAfter(req: Serialisable<ChatCompletionRequest>, abortAfterMs: number, settleWithinMs: number): Promise<AbortedRun<ChatCompletion>> {
    return this.page.evaluate(
      async ({ id, req, abortAfterMs, settleWithinMs }) => {
        const rx = window.rx;
        const mod = await rx.module();
        const engine = rx.engine(id);
        const controller = new AbortController();
        let abortedAt = Number.NaN;
        const sent = performance.now();
        const pending = engine.chat.completions
          .create({ ...req, signal: controller.signal, stream: false })
          .then(
            (value) => ({ ok: true as const, value: JSON.parse(JSON.stringify(value)) as ChatCompletion }),
            (e: unknown) => ({ ok: false as const, error: rx.describe(e, mod) }),
          );
        const stillRunning = new Promise<null>((resolve) =>
          setTimeout(() => {
            controller.abort();
            abortedAt = performance.now();
            setTimeout(() => resolve(null), settleWithinMs);
          }, abortAfterMs),
        );
        const outcome = await Promise.race([pending, stillRunning]);
        return { outcome, abortedAfterMs: abortedAt - sent, endedAfterAbortMs: outcome ? performance.now() - abortedAt : null };
      },
      { id: this.id, req, abortAfterMs, settleWithinMs },
    );
  }

  /** A non-stream request. */
  run<K extends Kind>(kind: K, req: Serialisable<RequestOf<K>>): Promise<Outcome<ResponseOf<K>>> {
    return this.page.evaluate(
      async ({ id, kind, req }) => {
        const rx = window.rx;
        const mod = await rx.module();
        const engine = rx.engine(id);
        try {
          const value =
            kind === "chat"
              ? await engine.chat.completions.create({ ...(req as ChatCompletionRequest), stream: false })
              : await engine.completions.create({ ...(req as CompletionRequest), stream: false });
          return { ok: true as const, value: JSON.parse(JSON.stringify(value)) as ChatCompletion | Completion };
        } catch (e) {
          return { ok: false as const, error: rx.describe(e, mod) };
        }
      },
      { id: this.id, kind: kind as Kind, req: req as Serialisable<ChatCompletionRequest | CompletionRequest> },
    ) as Promise<Outcome<ResponseOf<K>>>;
  }

  streamChat(req: Serialisable<ChatCompletionRequest>, opts: { abortAfterChunks?: number } = {}): Promise<StreamResult<ChatCompletionChunk>> {
    return this.stream("chat", req, opts);
  }

  streamCompletion(req: Serialisable<CompletionRequest>, opts: { abortAfterChunks?: number } = {}): Promise<StreamResult<CompletionChunk>> {
    return this.stream("completion", req, opts);
  }

  /** Iterates a stream to its end; with abortAfterChunks, calls controller.abort() right after that chunk. */
  stream<K extends Kind>(kind: K, req: Serialisable<RequestOf<K>>, { abortAfterChunks }: { abortAfterChunks?: number } = {}): Promise<StreamResult<ChunkOf<K>>> {
    return this.page.evaluate(
      async ({ id, kind, req, abortAfterChunks }) => {
        const rx = window.rx;
        const mod = await rx.module();
        const engine = rx.engine(id);
        const controller = new AbortController();
        const signal = controller.signal;
        const chunks: unknown[] = [];
        let aborted = false;
        let chunksAfterAbort = 0;
        try {
          const stream =
            kind === "chat"
              ? await engine.chat.completions.create({ ...(req as ChatCompletionRequest), signal, stream: true })
              : await engine.completions.create({ ...(req as CompletionRequest), signal, stream: true });
          for await (const chunk of stream) {
            chunks.push(JSON.parse(JSON.stringify(chunk)));
            if (aborted) chunksAfterAbort++;
            if (abortAfterChunks !== null && chunks.length === abortAfterChunks) {
              controller.abort();
              aborted = true;
            }
          }
          return { chunks, error: null, chunksAfterAbort };
        } catch (e) {
          return { chunks, error: rx.describe(e, mod), chunksAfterAbort };
        }
      },
      { id: this.id, kind: kind as Kind, req: req as Serialisable<ChatCompletionRequest | CompletionRequest>, abortAfterChunks: abortAfterChunks ?? null },
    ) as Promise<StreamResult<ChunkOf<K>>>;
  }

  cacheStats(): Promise<CacheStats> {
    return this.page.evaluate(async (id) => JSON.parse(JSON.stringify(await window.rx.engine(id).cache.stats())) as CacheStats, this.id);
  }

  clearCache(): Promise<void> {
    return this.page.evaluate(async (id) => window.rx.engine(id).cache.clear(), this.id);
  }

  pin(prefix: PrefixToPin): Promise<number> {
    return this.page.evaluate(async ({ id, prefix }) => window.rx.engine(id).cache.pin(prefix), { id: this.id, prefix });
  }

  unpin(prefix: PrefixToPin): Promise<boolean> {
    return this.page.evaluate(async ({ id, prefix }) => window.rx.engine(id).cache.unpin(prefix), { id: this.id, prefix });
  }

  destroyDevice(): Promise<void> {
    return this.page.evaluate(async (id) => window.rx.engine(id).debug.destroyDevice(), this.id);
  }

  wasmMemoryBytes(): Promise<number> {
    return this.page.evaluate(async (id) => window.rx.engine(id).debug.wasmMemoryBytes(), this.id);
  }

  reloads(): Promise<number> {
    return this.page.evaluate(async (id) => window.rx.engine(id).debug.reloads(), this.id);
  }

  dispose(): Promise<void> {
    return this.page.evaluate(async (id) => {
      await window.rx.engine(id).dispose();
      delete window.rx.engines[id];
    }, this.id);
  }
}

/** Deletes the package's Cache API copy of every model (clearModelCache). */
export async function clearModelCache(page: Page): Promise<void> {
  await page.evaluate(async () => (await window.rx.module()).clearModelCache());
}

/** The reply text of a chat completion or a completion. */
export function replyText(r: ChatCompletion | Completion): string {
  return r.object === "chat.completion" ? (r.choices[0].message.content ?? "") : r.choices[0].text;
}

/** The text a chat or completion chunk adds. */
export function chunkText(c: ChatCompletionChunk | CompletionChunk): string {
  return c.object === "chat.completion.chunk" ? (c.choices[0]?.delta.content ?? "") : (c.choices[0]?.text ?? "");
}
