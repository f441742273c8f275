//! Writes a step's keys and values into the paged f16 KV cache (kv_store.wgsl).

use super::wgsl;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::KvStore,
    source: wgsl!("kv_store.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::Read, Slot::ReadWrite, Slot::ReadWrite],
};

/// k, v (T, Hkv, D) f32 → k_cache, v_cache (pages, page_size, Hkv, D/2) u32 f16 pairs, token t
/// at position p = start_pos + t: slot p % page_size of page page_table[p / page_size].
pub struct KvStore {
    pairs_per_token: u32,
    pipeline: wgpu::ComputePipeline,
}

pub struct KvStoreBinding {
    group: wgpu::BindGroup,
}

impl KvStore {
    pub fn new(gpu: &Gpu, n_kv_heads: usize, head_dim: usize, page_size: usize) -> Self {
        let key = PipelineKey::new(OpKind::KvStore, "main").with("HKV", n_kv_heads as u32).with("D", head_dim as u32).with("PAGE", page_size as u32);
        Self { pairs_per_token: (n_kv_heads * head_dim / 2) as u32, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams), `k` and `v` (T, Hkv, D) f32, `page_table` (pages) u32 and
    /// the caches (pages, page_size, Hkv, D/2) u32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, k: &wgpu::Buffer, v: &wgpu::Buffer, page_table: &wgpu::Buffer, k_cache: &wgpu::Buffer, v_cache: &wgpu::Buffer) -> KvStoreBinding {
        KvStoreBinding { group: gpu.bind_group("kv_store", KERNEL.slots, &[step, k, v, page_table, k_cache, v_cache]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &KvStoreBinding, n_tokens: u32) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        dispatch_linear(pass, (n_tokens * self.pairs_per_token).div_ceil(256));
    }
}
