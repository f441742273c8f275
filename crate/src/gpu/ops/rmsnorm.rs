//! RMS normalisation of rows (rmsnorm.wgsl).

use super::wgsl;
use crate::gpu::pipelines::{Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::RmsNorm,
    source: wgsl!("rmsnorm.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// x (T, C), w (C) f32 → out (T, C) = x / sqrt(mean(x²) + eps) · w; with `last_row_only`,
/// only row T-1 is normalised, into out (1, C) (the LM head's input); `RmsNorm::add`: out +=
/// instead.
pub struct RmsNorm {
    last_row_only: bool,
    pipeline: wgpu::ComputePipeline,
}

pub struct RmsNormBinding {
    group: wgpu::BindGroup,
}

impl RmsNorm {
    pub fn new(gpu: &Gpu, c: usize, eps: f32, last_row_only: bool) -> Self {
        Self::build(gpu, c, eps, last_row_only, false)
    }

    /// out (T, C) += x / sqrt(mean(x²) + eps) · w: a post norm and its residual add.
    pub fn add(gpu: &Gpu, c: usize, eps: f32) -> Self {
        Self::build(gpu, c, eps, false, true)
    }

    fn build(gpu: &Gpu, c: usize, eps: f32, last_row_only: bool, add: bool) -> Self {
        let key = PipelineKey::new(OpKind::RmsNorm, "main").with("C", c as u32).with("EPS", eps).with("LAST_ROW_ONLY", last_row_only as u32).with("ADD", add as u32);
        Self { last_row_only, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams), `x` (T, C), `w` (C) and `out` ((T or 1), C), all f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, x: &wgpu::Buffer, w: &wgpu::Buffer, out: &wgpu::Buffer) -> RmsNormBinding {
        RmsNormBinding { group: gpu.bind_group("rmsnorm", KERNEL.slots, &[step, x, w, out]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &RmsNormBinding, n_tokens: u32) {
        if n_tokens == 0 {
            return;
        }
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        // One workgroup per row; n_tokens is at most the batch, far below 65535.
        pass.dispatch_workgroups(if self.last_row_only { 1 } else { n_tokens }, 1, 1);
    }
}
