//! Greedy token choice on the GPU (argmax.wgsl), so decoding reads back 4 bytes, not V logits.

use super::wgsl;
use crate::gpu::pipelines::{Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel { op: OpKind::Argmax, source: wgsl!("argmax.wgsl"), slots: &[Slot::Read, Slot::ReadWrite] };

/// logits (V) f32 → out (1) u32: the index of the largest logit, the first on ties
/// (u32::MAX if every logit is -inf or NaN).
pub struct Argmax {
    pipeline: wgpu::ComputePipeline,
}

pub struct ArgmaxBinding {
    group: wgpu::BindGroup,
}

impl Argmax {
    pub fn new(gpu: &Gpu, vocab: usize) -> Self {
        Self { pipeline: gpu.pipeline(&KERNEL, PipelineKey::new(OpKind::Argmax, "main").with("V", vocab as u32)) }
    }

    /// Binds `logits` (V) f32 and `out` (1) u32.
    pub fn bind(&self, gpu: &Gpu, logits: &wgpu::Buffer, out: &wgpu::Buffer) -> ArgmaxBinding {
        ArgmaxBinding { group: gpu.bind_group("argmax", KERNEL.slots, &[logits, out]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &ArgmaxBinding) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
}
