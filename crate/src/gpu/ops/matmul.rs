//! `y = x · wᵀ` (or `y += x · wᵀ`) with `w` in its GGUF block format (matmul.wgsl).

use super::wgsl;
use crate::gguf::GgmlType;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::{Gpu, GpuWeight, WeightPart};

pub const KERNEL: Kernel = Kernel {
    op: OpKind::Matmul,
    source: wgsl!("matmul.wgsl", blocks),
    slots: &[Slot::Uniform, Slot::Uniform, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// Steps of at most this many tokens use the matrix-vector kernel (matmul.wgsl MATVEC_MAX_T).
pub const MATVEC_MAX_T: u32 = 4;
const MATVEC_WG: u32 = 64;
const TILE: u32 = 64;

/// x (T, K) f32 · w (N rows of K, any supported type)ᵀ → y (T, N) f32.
pub struct Matmul {
    ty: GgmlType,
    k: usize,
    n: usize,
    matvec: wgpu::ComputePipeline,
    tiled: wgpu::ComputePipeline,
}

/// Bind groups for one (step, x, w, y), one per weight part.
pub struct MatmulBinding {
    parts: Vec<(wgpu::BindGroup, u32)>,
}

/// blocks.wgsl `Part`: the rows of the weight one buffer holds.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy)]
struct PartParams {
    first_row: u32,
    rows: u32,
    _pad: [u32; 2],
}

/// The uniform describing `part` to the kernels that read weights.
pub(super) fn part_params(gpu: &Gpu, part: &WeightPart) -> wgpu::Buffer {
    gpu.uniform("weight part", &PartParams { first_row: part.first_row as u32, rows: part.rows as u32, _pad: [0; 2] })
}

impl Matmul {
    /// For a weight of `ty` with `n` rows of `k`; `accumulate` adds into y instead of writing.
    pub fn new(gpu: &Gpu, ty: GgmlType, k: usize, n: usize, accumulate: bool) -> Self {
        let key = |entry| {
            PipelineKey::new(OpKind::Matmul, entry)
                .with("DTYPE", ty.id())
                .with("K", k as u32)
                .with("N", n as u32)
                .with("ACCUMULATE", accumulate as u32)
        };
        Self { ty, k, n, matvec: gpu.pipeline(&KERNEL, key("matvec")), tiled: gpu.pipeline(&KERNEL, key("matmul_tiled")) }
    }

    /// Binds `step` (StepParams), `x` (T, K) f32, the weight and `y` (T, N) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, x: &wgpu::Buffer, w: &GpuWeight, y: &wgpu::Buffer) -> MatmulBinding {
        assert!(w.ty == self.ty && w.k == self.k && w.n == self.n, "matmul built for {:?} ({}, {}) bound to {:?} ({}, {})", self.ty, self.n, self.k, w.ty, w.n, w.k);
        let parts = w
            .parts
            .iter()
            .map(|p| {
                let params = part_params(gpu, p);
                (gpu.bind_group("matmul", KERNEL.slots, &[step, &params, x, &p.buffer, y]), p.rows as u32)
            })
            .collect();
        MatmulBinding { parts }
    }

    /// Encodes the product for the first `n_tokens` rows of x (must equal the step's n_tokens).
    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &MatmulBinding, n_tokens: u32) {
        if n_tokens == 0 {
            return;
        }
        for (group, rows) in &binding.parts {
            pass.set_bind_group(0, group, &[]);
            if n_tokens <= MATVEC_MAX_T {
                pass.set_pipeline(&self.matvec);
                dispatch_linear(pass, rows.div_ceil(MATVEC_WG));
            } else {
                pass.set_pipeline(&self.tiled);
                pass.dispatch_workgroups(rows.div_ceil(TILE), n_tokens.div_ceil(TILE), 1);
            }
        }
    }
}
