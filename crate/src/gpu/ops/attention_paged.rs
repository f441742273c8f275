//! Causal GQA attention over the paged f16 KV cache (attention_paged.wgsl).

use super::wgsl;
use crate::gpu::pipelines::{Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::AttentionPaged,
    source: wgsl!("attention_paged.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// Largest head dimension the kernel holds (attention_paged.wgsl MAX_D).
pub const MAX_HEAD_DIM: usize = 256;
/// Most query heads per KV head (attention_paged.wgsl MAX_G).
pub const MAX_GROUP: usize = 8;

/// q (T, H, D) f32 + the caches through page_table → out (T, H, D) f32: query t (position
/// start_pos + t) attends positions 0..=start_pos+t of KV head h / (H / Hkv), scale 1/sqrt(D).
pub struct AttentionPaged {
    n_kv_heads: u32,
    pipeline: wgpu::ComputePipeline,
}

pub struct AttentionPagedBinding {
    group: wgpu::BindGroup,
}

impl AttentionPaged {
    /// `head_dim` must be even and at most `MAX_HEAD_DIM`; `n_kv_heads` must divide `n_heads`
    /// with at most `MAX_GROUP` query heads per KV head.
    pub fn new(gpu: &Gpu, n_heads: usize, n_kv_heads: usize, head_dim: usize, page_size: usize) -> Self {
        assert!(
            head_dim % 2 == 0 && head_dim <= MAX_HEAD_DIM && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= MAX_GROUP,
            "attention: unsupported heads {n_heads}/{n_kv_heads} × {head_dim}"
        );
        let key = PipelineKey::new(OpKind::AttentionPaged, "main")
            .with("H", n_heads as u32)
            .with("HKV", n_kv_heads as u32)
            .with("D", head_dim as u32)
            .with("PAGE", page_size as u32);
        Self { n_kv_heads: n_kv_heads as u32, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams), `q` (T, H, D) f32, `page_table` (pages) u32, the caches
    /// (pages, page_size, Hkv, D/2) u32 and `out` (T, H, D) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, q: &wgpu::Buffer, page_table: &wgpu::Buffer, k_cache: &wgpu::Buffer, v_cache: &wgpu::Buffer, out: &wgpu::Buffer) -> AttentionPagedBinding {
        AttentionPagedBinding { group: gpu.bind_group("attention_paged", KERNEL.slots, &[step, q, page_table, k_cache, v_cache, out]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &AttentionPagedBinding, n_tokens: u32) {
        if n_tokens == 0 {
            return;
        }
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        // One workgroup per (KV head, token); both far below 65535.
        pass.dispatch_workgroups(self.n_kv_heads, n_tokens, 1);
    }
}
