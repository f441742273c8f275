//! The GPU side: one device (`context`), a get-or-create pipeline cache keyed by a typed
//! `PipelineKey` (`pipelines`), weights uploaded in their GGUF block formats (`weights`),
//! readback of results (`readback`) and one typed dispatcher per WGSL kernel file (`ops`).
//!
//! Per layer the engine encodes, with no copies between ops (every op reads and writes buffers
//! allocated once at the maximum batch size; the rows processed come from `StepParams`):
//! rmsnorm(x → h) → matmul q, k, v (h → q, k, v) → rope q, rope k (in place) →
//! kv_store (k, v → this layer's paged caches) → attention_paged (q + caches → a) →
//! matmul o (a, accumulate into x) → rmsnorm(x → h) → matmul gate, up (h → g, u) →
//! silu_mul (g, u → f) → matmul down (f, accumulate into x); then rmsnorm(last row of x →
//! h1) → matmul lm_head (h1 → logits, with a StepParams of n_tokens = 1) → read_f32(logits).

pub mod context;
pub mod pipelines;
pub mod readback;
pub mod weights;
pub mod ops;
#[cfg(not(target_arch = "wasm32"))]
pub mod executor;

pub use context::{Gpu, GpuError, LimitsPolicy, StepParams};
pub use weights::{GpuWeight, WeightPart};
