//! KV pages to and from the spill format on the GPU (kv_quant.wgsl; the CPU reference is
//! `kv::spill::quant`).

use super::wgsl;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;
use crate::kv::spill::QuantLayout;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::KvQuant,
    source: wgsl!("kv_quant.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::ReadWrite, Slot::ReadWrite],
};

/// `lk` of one dispatch: which slice (layer · 2 + K/V) of a page's record it covers.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy, Debug, Default)]
pub struct SpillParams {
    pub lk: u32,
    pub _pad: [u32; 3],
}

/// pool (pool pages, page_values / 2) u32 f16 pairs ⇄ packed (batch pages, n_lk, groups, words
/// per group) u32, for the pages listed in `batch` (count, then page ids).
pub struct KvQuant {
    groups_per_page: u32,
    quantize: wgpu::ComputePipeline,
    dequantize: wgpu::ComputePipeline,
}

pub struct KvQuantBinding {
    group: wgpu::BindGroup,
}

impl KvQuant {
    /// For pages of `page_values` values per layer and K or V, records of `n_lk` such slices.
    pub fn new(gpu: &Gpu, layout: QuantLayout, page_values: usize, n_lk: usize) -> Self {
        let key = |entry| {
            PipelineKey::new(OpKind::KvQuant, entry)
                .with("BITS", layout.format.bits())
                .with("G", layout.group as u32)
                .with("PAGE_VALUES", page_values as u32)
                .with("N_LK", n_lk as u32)
        };
        Self {
            groups_per_page: (page_values / layout.group) as u32,
            quantize: gpu.pipeline(&KERNEL, key("quantize")),
            dequantize: gpu.pipeline(&KERNEL, key("dequantize")),
        }
    }

    /// Binds `params` (SpillParams), `batch` (1 + pages) u32, one layer's K or V `pool` and
    /// `packed`.
    pub fn bind(&self, gpu: &Gpu, params: &wgpu::Buffer, batch: &wgpu::Buffer, pool: &wgpu::Buffer, packed: &wgpu::Buffer) -> KvQuantBinding {
        KvQuantBinding { group: gpu.bind_group("kv_quant", KERNEL.slots, &[params, batch, pool, packed]) }
    }

    /// Quantizes the slice of `n_pages` listed pages into `packed`.
    pub fn encode_quantize(&self, pass: &mut wgpu::ComputePass, binding: &KvQuantBinding, n_pages: u32) {
        self.encode(pass, &self.quantize, binding, n_pages);
    }

    /// Decodes `packed` into the slice of `n_pages` listed pages.
    pub fn encode_dequantize(&self, pass: &mut wgpu::ComputePass, binding: &KvQuantBinding, n_pages: u32) {
        self.encode(pass, &self.dequantize, binding, n_pages);
    }

    fn encode(&self, pass: &mut wgpu::ComputePass, pipeline: &wgpu::ComputePipeline, binding: &KvQuantBinding, n_pages: u32) {
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        dispatch_linear(pass, n_pages * self.groups_per_page);
    }
}
