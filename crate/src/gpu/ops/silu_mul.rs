//! SwiGLU activation (silu_mul.wgsl).

use super::wgsl;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::SiluMul,
    source: wgsl!("silu_mul.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// gate, up (T, F) f32 → out (T, F) = silu(gate) · up.
pub struct SiluMul {
    f: u32,
    pipeline: wgpu::ComputePipeline,
}

pub struct SiluMulBinding {
    group: wgpu::BindGroup,
}

impl SiluMul {
    pub fn new(gpu: &Gpu, f: usize) -> Self {
        Self { f: f as u32, pipeline: gpu.pipeline(&KERNEL, PipelineKey::new(OpKind::SiluMul, "main").with("F", f as u32)) }
    }

    /// Binds `step` (StepParams), `gate`, `up` and `out`, each (T, F) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, gate: &wgpu::Buffer, up: &wgpu::Buffer, out: &wgpu::Buffer) -> SiluMulBinding {
        SiluMulBinding { group: gpu.bind_group("silu_mul", KERNEL.slots, &[step, gate, up, out]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &SiluMulBinding, n_tokens: u32) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        dispatch_linear(pass, (n_tokens * self.f).div_ceil(256));
    }
}
