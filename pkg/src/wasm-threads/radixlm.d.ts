// The threaded build's glue (dist/wasm-threads/): the same surface as the single-threaded one,
// on a shared memory. tsc emits nothing for this file.
export * from "../wasm/radixlm.js";
export { default } from "../wasm/radixlm.js";
