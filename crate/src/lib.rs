//! radixlm: a language-model runtime for WebGPU with a radix-tree prefix cache.
//!
//! `gguf` reads model files; `tokenizer` turns text into ids and renders chat templates;
//! `model` holds the configuration and the CPU reference forward pass (the oracle); `gpu`
//! owns the device and one dispatcher per WGSL kernel; `kv` the paged KV pool and the radix
//! tree; `engine` runs requests on the GPU; `bench` is the benchmark protocol; `wasm` is the browser surface.

pub mod gguf;
pub mod model;
pub mod tokenizer;
pub mod gpu;
pub mod kv;
pub mod engine;
pub mod bench;
#[cfg(target_arch = "wasm32")]
pub mod wasm;
