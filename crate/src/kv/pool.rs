//! The paged KV pool on the GPU: per-layer K and V buffers cut into pages of `page_size`
//! token slots. A sequence's page table lists its pages in order; attention reads through it,
//! so sequences that share a prefix can share pages with zero copies.

use crate::gpu::context::Gpu;
use crate::model::Config;

/// Tokens per page. 16 keeps the unshared tail of a prompt (recomputed on a cache hit) short
/// while page tables stay small.
pub const DEFAULT_PAGE_SIZE: usize = 16;

/// Bytes one page takes across all layers, K and V, stored as f16.
pub fn page_bytes(cfg: &Config, page_size: usize) -> u64 {
    (cfg.n_layers * 2 * page_size * cfg.kv_dim() * 2) as u64
}

pub struct KvPool {
    pub page_size: usize,
    /// Per layer: (n_pages · page_size · n_kv_heads · head_dim / 2) u32, f16 pairs.
    pub k: Vec<wgpu::Buffer>,
    /// Per layer, same layout as `k`.
    pub v: Vec<wgpu::Buffer>,
    pub n_pages: usize,
}

impl KvPool {
    /// A pool of as many pages as `budget_bytes` allows, clamped so no per-layer buffer exceeds
    /// the device's storage binding and buffer size limits.
    pub fn new(gpu: &Gpu, cfg: &Config, page_size: usize, budget_bytes: u64) -> Self {
        let per_layer_page = (page_size * cfg.kv_dim() * 2) as u64;
        let max_binding = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        let n_pages = (budget_bytes / page_bytes(cfg, page_size))
            .min(max_binding / per_layer_page)
            .max(1);
        let size = n_pages * per_layer_page;
        let layer = |kind: &str, i: usize| gpu.storage(&format!("kv.{kind}.{i}"), size);
        Self {
            page_size,
            k: (0..cfg.n_layers).map(|i| layer("k", i)).collect(),
            v: (0..cfg.n_layers).map(|i| layer("v", i)).collect(),
            n_pages: n_pages as usize,
        }
    }
}
