//! Embedding lookup from a table in its GGUF block format (embed.wgsl).

use super::wgsl;
use crate::gguf::GgmlType;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::{Gpu, GpuWeight};

pub const KERNEL: Kernel = Kernel {
    op: OpKind::Embed,
    source: wgsl!("embed.wgsl", "blocks.wgsl"),
    slots: &[Slot::Uniform, Slot::Uniform, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// ids (T) u32 → out (T, C) f32: row ids[t] of a (V, C) table of any supported type, times
/// `scale`.
pub struct Embed {
    ty: GgmlType,
    c: usize,
    pipeline: wgpu::ComputePipeline,
}

/// Bind groups for one (step, ids, table, out), one per table part.
pub struct EmbedBinding {
    parts: Vec<wgpu::BindGroup>,
}

impl Embed {
    pub fn new(gpu: &Gpu, ty: GgmlType, c: usize, scale: f32) -> Self {
        let key = PipelineKey::new(OpKind::Embed, "main").with("DTYPE", ty.id()).with("C", c as u32).with("SCALE", scale);
        Self { ty, c, pipeline: gpu.pipeline(&KERNEL, key) }
    }

    /// Binds `step` (StepParams), `ids` (T) u32, the table and `out` (T, C) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, ids: &wgpu::Buffer, table: &GpuWeight, out: &wgpu::Buffer) -> EmbedBinding {
        assert!(table.ty == self.ty && table.k == self.c, "embed built for {:?} width {} bound to {:?} width {}", self.ty, self.c, table.ty, table.k);
        let parts = table
            .parts
            .iter()
            .map(|p| {
                let part = super::matmul::part_params(gpu, p);
                gpu.bind_group("embed", KERNEL.slots, &[step, &part, ids, &p.buffer, out])
            })
            .collect();
        EmbedBinding { parts }
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &EmbedBinding, n_tokens: u32) {
        pass.set_pipeline(&self.pipeline);
        for group in &binding.parts {
            pass.set_bind_group(0, group, &[]);
            dispatch_linear(pass, (n_tokens * self.c as u32).div_ceil(256));
        }
    }
}
