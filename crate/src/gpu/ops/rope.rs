//! Rotary position embedding in place (rope.wgsl).

use super::wgsl;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel { op: OpKind::Rope, source: wgsl!("rope.wgsl"), slots: &[Slot::Uniform, Slot::ReadWrite] };

/// x (T, H, D) f32, rotated in place at positions start_pos + t (llama "normal" mode).
pub struct Rope {
    pairs_per_token: u32,
    pipeline: wgpu::ComputePipeline,
}

pub struct RopeBinding {
    group: wgpu::BindGroup,
}

impl Rope {
    pub fn new(gpu: &Gpu, n_heads: usize, head_dim: usize, base: f32) -> Self {
        let key = PipelineKey::new(OpKind::Rope, "main").with("H", n_heads as u32).with("D", head_dim as u32).with("BASE", base);
        Self { pairs_per_token: (n_heads * head_dim / 2) as u32, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams) and `x` (T, H, D) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, x: &wgpu::Buffer) -> RopeBinding {
        RopeBinding { group: gpu.bind_group("rope", KERNEL.slots, &[step, x]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &RopeBinding, n_tokens: u32) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        dispatch_linear(pass, (n_tokens * self.pairs_per_token).div_ceil(256));
    }
}
