// A CPU thread of the engine's threaded wasm build, started by the engine's worker (threads.ts):
// it instantiates the module on the engine's shared memory and takes the CPU backend's tasks
// until the engine is freed.

import { cpu_thread_run, initSync } from "./wasm-threads/radixlm.js";

interface ThreadStart {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  seat: number;
}

/** The thread's global scope (the WebWorker lib cannot share a program with DOM). */
interface ThreadScope {
  onmessage: ((event: MessageEvent<ThreadStart>) => void) | null;
  postMessage(message: "running"): void;
  close(): void;
}

const scope = self as unknown as ThreadScope;

scope.onmessage = ({ data: { module, memory, seat } }) => {
  scope.onmessage = null;
  initSync({ module, memory });
  scope.postMessage("running");
  cpu_thread_run(seat);
  scope.close();
};
