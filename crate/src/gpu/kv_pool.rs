//! The paged KV pool on the GPU: per-layer K and V buffers cut into pages of `page_size`
//! token slots. A sequence's page table lists its pages in order; attention reads through it,
//! so sequences that share a prefix can share pages with zero copies.

use crate::gpu::context::Gpu;
use crate::kv::page_bytes;
use crate::model::Config;

pub struct KvPool {
    pub page_size: usize,
    /// Per layer: (n_pages · page_size · n_kv_heads · head_dim / 2) u32, f16 pairs.
    pub k: Vec<wgpu::Buffer>,
    /// Per layer, same layout as `k`.
    pub v: Vec<wgpu::Buffer>,
    pub n_pages: usize,
}

impl KvPool {
    /// Pages of `page_size` slots that `budget_bytes` buys, clamped so no per-layer buffer
    /// exceeds the device's storage binding and buffer size limits.
    pub fn pages_for(gpu: &Gpu, cfg: &Config, page_size: usize, budget_bytes: u64) -> usize {
        let per_layer_page = (page_size * cfg.kv_dim() * 2) as u64;
        let max_binding = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        (budget_bytes / page_bytes(cfg, page_size)).min(max_binding / per_layer_page).max(1) as usize
    }

    /// A pool of `n_pages` pages (see [`pages_for`](Self::pages_for)).
    pub fn new(gpu: &Gpu, cfg: &Config, page_size: usize, n_pages: usize) -> Self {
        let size = (n_pages * page_size * cfg.kv_dim() * 2) as u64;
        let layer = |kind: &str, i: usize| gpu.storage(&format!("kv.{kind}.{i}"), size);
        Self {
            page_size,
            k: (0..cfg.n_layers).map(|i| layer("k", i)).collect(),
            v: (0..cfg.n_layers).map(|i| layer("v", i)).collect(),
            n_pages,
        }
    }

    /// Bytes one page takes in one layer's K (or V) buffer.
    pub fn page_bytes_per_layer(&self) -> u64 {
        self.k.first().map_or(0, |b| b.size() / self.n_pages as u64)
    }
}
