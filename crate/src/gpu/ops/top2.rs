//! Greedy decoding's pick on the GPU (top2.wgsl): the largest logit's index and its lead over
//! the runner-up, skipping banned ids and those a grammar's mask forbids, so a greedy step
//! reads back 16 bytes, not V logits.

use super::wgsl;
use crate::gpu::pipelines::{Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel { op: OpKind::Top2, source: wgsl!("top2.wgsl", "pick_filter.wgsl"), slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::Read, Slot::ReadWrite] };

/// Bytes of the kernel's output: index, best and second logit (f32 bits), padding.
pub const TOP2_BYTES: u64 = 16;

/// top2.wgsl `PickParams`.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PickParams {
    /// How many of the banned ids apply this step (0: none).
    pub n_banned: u32,
    /// 1: only the ids set in the `allowed` bitmask.
    pub masked: u32,
    pub _pad: [u32; 2],
}

pub use crate::engine::sampling::Top2;

impl Top2 {
    /// The pick as top2.wgsl writes it: index (u32::MAX for none), best, second.
    pub fn from_words(words: [u32; 4]) -> Self {
        let index = (words[0] != u32::MAX).then_some(words[0]);
        // top2.wgsl starts from the lowest finite f32 in place of -inf.
        let value = |bits: u32| if bits == f32::MIN.to_bits() { f32::NEG_INFINITY } else { f32::from_bits(bits) };
        Self { index, best: value(words[1]), second: value(words[2]) }
    }
}

/// params, logits (V) f32, banned ids, allowed bitmask → out (4) u32.
pub struct Top2Op {
    pipeline: wgpu::ComputePipeline,
}

pub struct Top2Binding {
    group: wgpu::BindGroup,
}

impl Top2Op {
    pub fn new(gpu: &Gpu, vocab: usize) -> Self {
        Self { pipeline: gpu.pipeline(&KERNEL, PipelineKey::new(OpKind::Top2, "main").with("V", vocab as u32)) }
    }

    /// Binds `params` (PickParams), `logits` (V) f32, `banned` (u32 ids, at least one word),
    /// `allowed` (a bitmask of V bits in whole words) and `out` (at least TOP2_BYTES).
    pub fn bind(&self, gpu: &Gpu, params: &wgpu::Buffer, logits: &wgpu::Buffer, banned: &wgpu::Buffer, allowed: &wgpu::Buffer, out: &wgpu::Buffer) -> Top2Binding {
        Top2Binding { group: gpu.bind_group("top2", KERNEL.slots, &[params, logits, banned, allowed, out]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &Top2Binding) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
}
