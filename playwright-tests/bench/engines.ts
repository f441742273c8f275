// The engines the browser benchmarks compare, each driven in its own tab through its public API:
// radixlm (this package, on its WebGPU or its CPU backend, 2 threads by default) and wllama
// (llama.cpp compiled to wasm, on the CPU with 2 threads: the engine a web page would use instead). Times are taken in
// the page, from the call to the first streamed text.

import { execFileSync } from "node:child_process";
import { cpus, totalmem } from "node:os";
import type { BrowserContext, Page } from "@playwright/test";
import { DEFAULT_MODEL_URL } from "../paths";

/** One greedy request as a benchmark sees it. */
export interface Run {
  /** From the create() call to the first chunk with text, in the page. */
  ttftMs: number;
  text: string;
  /** radixlm's token ids and top-2 gaps (wllama reports text only). */
  tokens: number[];
  gaps: number[];
  promptTokens: number;
  /** Prompt tokens whose KV the engine reused (radixlm: from the GPU; wllama: its slot's cache). */
  reusedTokens: number;
  /** Prompt tokens restored from IndexedDB (radixlm only). */
  restoredTokens: number;
  /** Prompt tokens computed by this request. */
  prefilledTokens: number;
  prefillTokensPerS: number;
  decodeTokensPerS: number;
  generatedTokens: number;
}

export interface BenchEngine {
  readonly name: string;
  /** Opens the engine's tab and loads the model; resolves to the load time in ms. */
  open(): Promise<number>;
  /** One greedy completion of `prompt`, streamed, `maxTokens` long (end-of-sequence tokens ignored). */
  complete(prompt: string, maxTokens: number): Promise<Run>;
  /** One greedy chat reply to `messages` (the model's chat template), streamed, at most `maxTokens` long. */
  chat(messages: Message[], maxTokens: number): Promise<Run>;
  /** Forgets every cached prefix, so the next request is cold. */
  forget(): Promise<void>;
  close(): Promise<void>;
}

export interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}

/** What a request sends besides its sampling: a prompt, or a conversation. */
type Body = { prompt: string } | { messages: Message[] };

/**
 * The model every engine of a run loads: the default model, or another served under /models/
 * (`RADIXLM_BENCH_MODEL`, e.g. /models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf; the speed
 * benchmark's completions need no chat template).
 */
const MODEL_URL = process.env.RADIXLM_BENCH_MODEL ?? DEFAULT_MODEL_URL;

/** An engine in a tab: completions and chats are one streamed request each, in the page. */
abstract class TabEngine implements BenchEngine {
  abstract readonly name: string;
  constructor(protected readonly page: Page) {}

  abstract open(): Promise<number>;
  abstract forget(): Promise<void>;
  protected abstract request(body: Body, maxTokens: number, ignoreEos: boolean): Promise<Run>;

  complete(prompt: string, maxTokens: number): Promise<Run> {
    return this.request({ prompt }, maxTokens, true);
  }

  chat(messages: Message[], maxTokens: number): Promise<Run> {
    return this.request({ messages }, maxTokens, false);
  }

  close(): Promise<void> {
    return this.page.close();
  }
}

export type RadixlmBackend = "webgpu" | "cpu";

/**
 * The radixlm backends the prefix and scenario benchmarks run, each beside the other and wllama in
 * the same run (`RADIXLM_BENCH_BACKEND`: "cpu", "webgpu" or "cpu,webgpu", the default).
 */
export function benchBackends(): RadixlmBackend[] {
  const asked = (process.env.RADIXLM_BENCH_BACKEND ?? "cpu,webgpu").split(",").map((b) => b.trim());
  const known = (b: string): b is RadixlmBackend => b === "cpu" || b === "webgpu";
  if (asked.length === 0 || !asked.every(known) || new Set(asked).size !== asked.length) {
    throw new Error(`RADIXLM_BENCH_BACKEND must be "cpu", "webgpu" or "cpu,webgpu", not ${process.env.RADIXLM_BENCH_BACKEND}`);
  }
  return asked as RadixlmBackend[];
}

/** The CPU threads of both engines in the prefix and scenario benchmarks (`RADIXLM_BENCH_THREADS`, 2 by default). */
export function benchThreads(): number {
  const asked = Number(process.env.RADIXLM_BENCH_THREADS ?? 2);
  if (!Number.isInteger(asked) || asked < 1) throw new Error(`RADIXLM_BENCH_THREADS must be a positive integer, not ${process.env.RADIXLM_BENCH_THREADS}`);
  return asked;
}

/** radixlm through the npm package's public API on one backend, in a tab of the harness page. */
export class RadixlmEngine extends TabEngine {
  readonly name: string;
  /** The threads the CPU backend runs on, once open (1 on WebGPU). */
  threads = 0;

  /** `threads`: the CPU backend's (2 by default, as wllama's; the page is cross-origin isolated). */
  constructor(
    page: Page,
    readonly backend: RadixlmBackend,
    private readonly askedThreads = 2,
  ) {
    super(page);
    this.name = backend === "webgpu" ? "radixlm (WebGPU)" : askedThreads === 2 ? "radixlm (CPU)" : `radixlm (CPU, ${askedThreads} thread${askedThreads === 1 ? "" : "s"})`;
  }

  async open(): Promise<number> {
    await this.page.goto("/harness/");
    const { ms, threads } = await this.page.evaluate(
      async ({ model, backend, threads }) => {
        const { createEngine } = (await import("/pkg/dist/index.js" as string)) as typeof import("../../pkg/src/index.js");
        const started = performance.now();
        const engine = await createEngine({ model, backend, threads });
        if (engine.info.backend !== backend) throw new Error(`asked for ${backend}, got ${engine.info.backend}`);
        (window as unknown as { benchEngine: unknown }).benchEngine = engine;
        return { ms: performance.now() - started, threads: engine.info.threads };
      },
      { model: MODEL_URL, backend: this.backend, threads: this.askedThreads },
    );
    if (this.backend === "cpu" && threads !== this.askedThreads) throw new Error(`${this.name} runs on ${threads} threads, not ${this.askedThreads}`);
    this.threads = threads;
    return ms;
  }

  /** Reloads the tab (a new worker, an empty GPU tier; IndexedDB and the Cache API stay) and loads again. */
  async reload(): Promise<number> {
    return this.open();
  }

  protected request(body: Body, maxTokens: number, ignoreEos: boolean): Promise<Run> {
    return this.page.evaluate(
      async ({ body, maxTokens, ignoreEos }) => {
        type Chunk = import("../../pkg/src/index.js").CompletionChunk | import("../../pkg/src/index.js").ChatCompletionChunk;
        const engine = (window as unknown as { benchEngine: import("../../pkg/src/index.js").Engine }).benchEngine;
        const sampling = { max_tokens: maxTokens, temperature: 0, ignore_eos: ignoreEos, stream: true as const };
        const started = performance.now();
        const stream: AsyncIterable<Chunk> =
          "messages" in body
            ? await engine.chat.completions.create({ ...sampling, messages: body.messages })
            : await engine.completions.create({ ...sampling, prompt: body.prompt });
        let ttft: number | undefined;
        let text = "";
        let last: Chunk | undefined;
        for await (const chunk of stream) {
          const choice = chunk.choices[0];
          const piece = choice === undefined ? "" : "delta" in choice ? (choice.delta.content ?? "") : choice.text;
          if (piece && ttft === undefined) ttft = performance.now() - started;
          text += piece;
          last = chunk;
        }
        const stats = last?.stats;
        if (!stats || !last?.usage) throw new Error("the stream ended without its usage chunk");
        return {
          ttftMs: ttft ?? performance.now() - started,
          text,
          tokens: last.tokens ?? [],
          gaps: last.top2_gaps ?? [],
          promptTokens: last.usage.prompt_tokens,
          reusedTokens: stats.reused_tokens,
          restoredTokens: stats.restored_tokens,
          prefilledTokens: stats.prefilled_tokens,
          prefillTokensPerS: stats.prefill_tokens_per_s,
          decodeTokensPerS: stats.decode_tokens_per_s,
          generatedTokens: stats.generated_tokens,
        };
      },
      { body, maxTokens, ignoreEos },
    );
  }

  forget(): Promise<void> {
    return this.page.evaluate(() => (window as unknown as { benchEngine: import("../../pkg/src/index.js").Engine }).benchEngine.cache.clear());
  }

  /** Waits until IndexedDB holds at least `records` pages and the write-behind has gone quiet. */
  async writtenBehind(records: number): Promise<void> {
    let previous = -1;
    for (let i = 0; i < 600; i++) {
      const now = await this.page.evaluate(async () => {
        const stats = await (window as unknown as { benchEngine: import("../../pkg/src/index.js").Engine }).benchEngine.cache.stats();
        return stats.spill?.records ?? 0;
      });
      if (now >= records && now === previous) return;
      previous = now;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`IndexedDB never held ${records} pages`);
  }

  async pageSize(): Promise<number> {
    return this.page.evaluate(async () => (await (window as unknown as { benchEngine: import("../../pkg/src/index.js").Engine }).benchEngine.cache.stats()).pageSize);
  }

}

/** wllama (@wllama/wllama, llama.cpp in wasm) on the CPU with 2 threads (or `asked`), in a cross-origin-isolated tab. */
export class WllamaEngine extends TabEngine {
  readonly name: string;
  /** The threads llama.cpp runs on, once open. */
  threads = 0;

  constructor(
    page: Page,
    private readonly asked = 2,
  ) {
    super(page);
    this.name = asked === 2 ? "wllama" : `wllama (${asked} thread${asked === 1 ? "" : "s"})`;
  }

  async open(): Promise<number> {
    await this.page.goto("/harness/");
    const { ms, threads } = await this.page.evaluate(async ({ model, nThreads }) => {
      if (!crossOriginIsolated) throw new Error("the page is not cross-origin isolated: wllama would run on one thread");
      const { Wllama } = (await import("/wllama/index.js" as string)) as { Wllama: new (paths: Record<string, string>, config: object) => WllamaLike };
      const wllama = new Wllama({ default: "/wllama/wasm/wllama.wasm" }, { suppressNativeLog: true });
      const started = performance.now();
      await wllama.loadModelFromUrl(new URL(model, location.href).href, { n_ctx: 8192, n_threads: nThreads, n_gpu_layers: 0, useCache: true });
      (window as unknown as { benchWllama: WllamaLike }).benchWllama = wllama;
      return { ms: performance.now() - started, threads: wllama.getNumThreads() };

      interface WllamaLike {
        loadModelFromUrl(url: string, params: object): Promise<void>;
        getNumThreads(): number;
      }
    }, { model: MODEL_URL, nThreads: this.asked });
    this.threads = threads;
    return ms;
  }

  protected request(body: Body, maxTokens: number, ignoreEos: boolean): Promise<Run> {
    return this.page.evaluate(
      async ({ body, maxTokens, ignoreEos }) => {
        interface Chunk {
          choices: Array<{ text?: string; delta?: { content?: string | null } }>;
          usage?: { prompt_tokens: number; completion_tokens: number } | null;
          timings?: { cache_n: number; prompt_n: number; prompt_per_second: number; predicted_n: number; predicted_per_second: number };
        }
        type Create = (o: object) => Promise<AsyncIterable<Chunk>>;
        const wllama = (window as unknown as { benchWllama: { createCompletion: Create; createChatCompletion: Create } }).benchWllama;
        const sampling = { max_tokens: maxTokens, temperature: 0, ignore_eos: ignoreEos, stream: true, cache_prompt: true };
        const started = performance.now();
        const stream = "messages" in body ? await wllama.createChatCompletion({ ...sampling, ...body }) : await wllama.createCompletion({ ...sampling, ...body });
        let ttft: number | undefined;
        let text = "";
        let usage: Chunk["usage"];
        let timings: Chunk["timings"];
        for await (const chunk of stream) {
          const choice = chunk.choices[0];
          const piece = choice?.text ?? choice?.delta?.content ?? "";
          if (piece && ttft === undefined) ttft = performance.now() - started;
          text += piece;
          usage = chunk.usage ?? usage;
          timings = chunk.timings ?? timings;
        }
        if (!timings) throw new Error("wllama reported no timings");
        return {
          ttftMs: ttft ?? performance.now() - started,
          text,
          tokens: [],
          gaps: [],
          promptTokens: usage?.prompt_tokens ?? timings.cache_n + timings.prompt_n,
          reusedTokens: timings.cache_n,
          restoredTokens: 0,
          prefilledTokens: timings.prompt_n,
          prefillTokensPerS: timings.prompt_per_second,
          decodeTokensPerS: timings.predicted_per_second,
          generatedTokens: timings.predicted_n,
        };
      },
      { body, maxTokens, ignoreEos },
    );
  }

  /**
   * wllama keeps the KV of earlier prompts (its slot, and a prompt cache beside it) and offers no
   * call to drop them: a new tab is the empty cache (the model comes from wllama's own cache).
   */
  async forget(): Promise<void> {
    await this.open();
  }

}

/** Where a benchmark ran: every result names its model, machine, browser and WebGPU adapter. */
export interface RunEnvironment {
  model: string;
  machine: string;
  browser: string;
  adapter: string;
  commit: string;
}

export async function runEnvironment(context: BrowserContext): Promise<RunEnvironment> {
  const probe = await context.newPage();
  await probe.goto("/harness/");
  const adapter = await probe.evaluate(async () => {
    const info = (await navigator.gpu?.requestAdapter())?.info;
    return info ? [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" ") : "none";
  });
  await probe.close();
  return {
    model: MODEL_URL === DEFAULT_MODEL_URL ? "SmolLM2-135M-Instruct Q4_1" : (MODEL_URL.split("/").pop() ?? MODEL_URL),
    machine: `${cpus()[0]?.model ?? "unknown CPU"}, ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB`,
    browser: `chromium ${context.browser()?.version() ?? "unknown"}`,
    adapter,
    commit: gitCommit(),
  };
}

/**
 * The commit the run was made at ("+ changes" when the tree differs from it, not counting the
 * results folder, which a full run rewrites as it goes).
 */
function gitCommit(): string {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude)playwright-tests/results"], { encoding: "utf8" }).trim() !== "";
    return dirty ? `${head} + changes` : head;
  } catch {
    return "unknown";
  }
}

/** The line under a results table that names the run. */
export const describe = (env: RunEnvironment): string => `${env.model} · ${env.machine} · ${env.browser} · adapter: ${env.adapter} · commit ${env.commit}`;
