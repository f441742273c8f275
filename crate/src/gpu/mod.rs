//! The WebGPU backend (`backend`): one device (`context`), a get-or-create pipeline cache keyed
//! by a typed `PipelineKey` (`pipelines`), weights uploaded in their GGUF block formats
//! (`weights`, `model_weights`), the KV pool (`kv_pool`), readback of results (`readback`), one
//! typed dispatcher per WGSL kernel file (`ops`) and the forward pass over them (`forward`).
//!
//! Per layer the engine encodes, with no copies between ops (every op reads and writes buffers
//! allocated once at the maximum batch size and bound once; the rows processed come from the
//! `StepParams` uniform the engine rewrites each forward call):
//!
//! | op | reads | writes |
//! |----|-------|--------|
//! | `Matmul` with the RMSNorm prologue, RoPE and the KV write its epilogue | x (T, C), attn_norm, Wqkv (or Wq, Wk, Wv: ×3), page table | q (T, H·D); this layer's k_cache, v_cache (f16 pairs) |
//! | `QkNorm` (qwen3, gemma3: per-head q/k norms, then RoPE and the k write) | q and k as the product wrote them | q; k_cache |
//! | `AttentionPaged` (split over the keys, then combined; a sliding-window layer's splits start at its window) | q, page table, k_cache, v_cache | a (T, H·D) |
//! | `Matmul` (accumulate) | a, Wo | x += a·Woᵀ (the residual add) |
//! | `Matmul` with the RMSNorm prologue and act·mul its epilogue | x, ffn_norm, Wgate_up (or Wgate, Wup: ×2, then `Glu`) | f (T, F) |
//! | `Matmul` (accumulate) | f, Wdown | x += f·Wdownᵀ |
//!
//! With post norms (gemma3) the o and down products write `post` (T, C) instead, and
//! `RmsNorm::add` adds its normalised rows to x.
//!
//! then `RmsNorm` with `last_row_only` (x → h1 (1, C)), `Matmul` for the LM head bound to a
//! second `StepParams` buffer holding n_tokens = 1 (h1 → logits (1, V)), and a copy of the
//! logits to a staging buffer (or, for greedy decoding, `Top2Op` and a copy of its 16 bytes),
//! all in one submit. Embedding (`Embed`, ids → x) opens the pass. Weights of any supported
//! GGUF type are dequantized inside `Embed` and `Matmul`; a weight larger than the
//! storage-binding limit is split by rows into parts, each dispatched over its own row range of
//! the output. `profile::Recorder` encodes the ops, into one pass or (profiling) one
//! timestamped pass each.

pub mod backend;
pub mod context;
pub mod forward;
pub mod kv_pool;
pub mod model_weights;
pub mod pipelines;
pub mod profile;
pub mod readback;
pub mod weights;
pub mod ops;
#[cfg(not(target_arch = "wasm32"))]
pub mod executor;

pub use context::{Gpu, GpuError, LimitsPolicy, StepParams};
pub use weights::{GpuWeight, HiRows, WeightPart};
