//! radixlm: a language-model runtime for WebGPU and WebAssembly with a radix-tree prefix cache.
//!
//! `gguf` reads model files; `tokenizer` turns text into ids and renders chat templates;
//! `model` holds the configuration and the CPU reference forward pass (the oracle); `gpu` is
//! the WebGPU backend (the device, one dispatcher per WGSL kernel, the forward pass) and `cpu`
//! the CPU backend (SIMD kernels on threads); `kv` the radix tree over KV pages and the spill
//! stores; `engine` runs requests on either backend; `api` is OpenAI's request and response shapes; `bench` is the benchmark protocol; `wasm`
//! is the browser surface.

pub mod gguf;
pub mod model;
pub mod tokenizer;
pub mod gpu;
pub mod cpu;
pub mod kv;
pub mod engine;
pub mod api;
pub mod bench;
#[cfg(target_arch = "wasm32")]
pub mod wasm;
