// The CPU backend's threads in the browser: the engine's worker computes, and each further thread
// is a Web Worker (cpu_thread.ts) on the threaded build's shared memory. Threads need a
// SharedArrayBuffer, so a page that is not cross-origin isolated (COOP/COEP headers) runs on one.

import { InternalError } from "./errors.js";

/** Threads the CPU backend runs on when the page does not say: every core, up to this. */
const MAX_DEFAULT_THREADS = 8;

/** The threads to run on: `asked`, or every core (up to 8); 1 where threads cannot run. */
export function cpuThreads(asked: number | undefined): number {
  if (!threadsAvailable()) return 1;
  return asked ?? Math.max(1, Math.min(navigator.hardwareConcurrency || 1, MAX_DEFAULT_THREADS));
}

/** Shared memory (cross-origin isolation) and workers that may start workers. */
export function threadsAvailable(): boolean {
  return globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === "function" && typeof Worker === "function";
}

/** Starts the threads an engine asks for (its loader's `spawn_thread`) and tells when they run. */
export class ThreadStarter {
  private readonly running: Promise<void>[] = [];

  /** Starts one thread on `seat` of the engine's pool. */
  readonly spawn = (module: WebAssembly.Module, memory: WebAssembly.Memory, seat: number): void => {
    const worker = new Worker(new URL("./cpu_thread.js", import.meta.url), { type: "module", name: `radixlm CPU thread ${this.running.length + 1}` });
    this.running.push(
      new Promise<void>((resolve, reject) => {
        worker.onmessage = () => resolve();
        worker.onerror = (event) => {
          event.preventDefault();
          reject(new InternalError(`A CPU thread of the engine could not start: ${event.message || "its worker script failed to load"}.`));
        };
      }),
    );
    worker.postMessage({ module, memory, seat });
  };

  /**
   * Resolves once every thread started so far runs. A browser starts a worker only while its
   * parent returns to its event loop, so the engine waits here, not in a busy loop.
   */
  async ready(): Promise<void> {
    await Promise.all(this.running);
  }
}
