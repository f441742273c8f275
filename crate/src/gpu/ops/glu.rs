//! The gated FFN's activation, for layers whose gate and up are two products (glu.wgsl).

use super::wgsl;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;
use crate::model::config::FfnAct;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::Glu,
    source: wgsl!("glu.wgsl", "act.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// gate, up (T, F) f32 → out (T, F) = act(gate) · up.
pub struct Glu {
    f: u32,
    pipeline: wgpu::ComputePipeline,
}

pub struct GluBinding {
    group: wgpu::BindGroup,
}

impl Glu {
    pub fn new(gpu: &Gpu, f: usize, act: FfnAct) -> Self {
        let key = PipelineKey::new(OpKind::Glu, "main").with("F", f as u32).with("GELU", (act == FfnAct::GeluTanh) as u32);
        Self { f: f as u32, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams), `gate`, `up` and `out`, each (T, F) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, gate: &wgpu::Buffer, up: &wgpu::Buffer, out: &wgpu::Buffer) -> GluBinding {
        GluBinding { group: gpu.bind_group("glu", KERNEL.slots, &[step, gate, up, out]) }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &GluBinding, n_tokens: u32) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        dispatch_linear(pass, (n_tokens * self.f).div_ceil(256));
    }
}
