//! q and k normalised per head, then rotated and written where attention reads them
//! (qk_norm.wgsl): Qwen3's and Gemma 3's step between the q/k/v product and attention.

use super::{wgsl, RopeTable};
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::QkNorm,
    source: wgsl!("qk_norm.wgsl", "rope.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::Read, Slot::Read, Slot::ReadWrite, Slot::ReadWrite, Slot::Uniform],
};

/// Raw q and k (T, n_q + n_kv) from an attention-input product built with `qk_norm` → q (T, n_q)
/// and k in the KV pages, each head RMS-normalised, scaled by its norm weights and rotated.
pub struct QkNorm {
    heads: u32,
    pipeline: wgpu::ComputePipeline,
}

pub struct QkNormBinding {
    group: wgpu::BindGroup,
}

impl QkNorm {
    /// `rope_neox`: the product wrote each head in NEOX order (matmul.wgsl ROPE_NEOX).
    pub fn new(gpu: &Gpu, n_q: usize, n_kv: usize, head_dim: usize, page_size: usize, eps: f32, rope_neox: bool) -> Self {
        let key = PipelineKey::new(OpKind::QkNorm, "main")
            .with("N_Q", n_q as u32)
            .with("N_KV", n_kv as u32)
            .with("HEAD_DIM", head_dim as u32)
            .with("PAGE", page_size as u32)
            .with("EPS", eps)
            .with("ROPE_NEOX", rope_neox as u32);
        Self { heads: ((n_q + n_kv) / head_dim) as u32, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams), `raw` (T, n_q + n_kv) f32, the layer's `q_norm` and `k_norm`
    /// (head_dim) f32, the sequence's `page_table`, `q` (T, n_q) f32, the layer's `k_cache` and
    /// the model's RoPE table.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, raw: &wgpu::Buffer, q_norm: &wgpu::Buffer, k_norm: &wgpu::Buffer, page_table: &wgpu::Buffer, q: &wgpu::Buffer, k_cache: &wgpu::Buffer, rope: &RopeTable) -> QkNormBinding {
        QkNormBinding { group: gpu.bind_group("qk_norm", KERNEL.slots, &[step, raw, q_norm, k_norm, page_table, q, k_cache, rope.buffer()]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &QkNormBinding, n_tokens: u32) {
        if n_tokens == 0 {
            return;
        }
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        dispatch_linear(pass, n_tokens * self.heads);
    }
}
