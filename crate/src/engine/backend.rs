//! The seam between the engine and what computes: a backend owns the weights as loaded, the
//! KV pages' memory and one operation, the forward pass over a batch of new tokens at
//! positions `start..start + T` through a page table, ending as [`Head`] asks. It also
//! quantizes pages for the spill tier and restores them. Everything above (the radix tree,
//! the page allocator, requests, sampling, the spill store, the API) is written once.

use std::sync::Arc;

use super::sampling::Top2;
use super::EngineError;
use crate::cpu::CpuBackend;
use crate::gpu::backend::{Captured as GpuCaptured, GpuBackend};
use crate::gpu::Gpu;
use crate::kv::spill::QuantLayout;
use crate::model::Config;

/// What a forward pass ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head<'a> {
    /// Nothing: a prefill batch that is not the prompt's last.
    None,
    /// The last token's logits.
    Logits,
    /// The greedy pick over the last token's logits, among the ids `Pick` allows.
    Greedy(Pick<'a>),
    /// The largest logits with their ids, among the ids `Pick` allows (only where
    /// [`Backend::has_top_k`]).
    TopK(Pick<'a>),
}

/// Which ids a pick on the backend may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pick<'a> {
    /// Skip the end-of-sequence ids (ignore_eos).
    pub ban_stops: bool,
    /// A grammar's mask: bit `i % 32` of word `i / 32` set where id `i` is allowed, one bit per
    /// logit ([`crate::engine::constraint::Constraint::allowed`]).
    pub allowed: Option<&'a [u32]>,
}

impl Pick<'_> {
    /// Whether id `id` may be picked, given the end-of-sequence ids `stops`.
    pub fn admits(&self, id: u32, stops: &[u32]) -> bool {
        !(self.ban_stops && stops.contains(&id)) && self.allowed.is_none_or(|words| super::constraint::is_allowed(words, id))
    }
}

/// What a forward pass gave.
#[derive(Debug, Clone)]
pub enum HeadOut {
    None,
    Logits(Vec<f32>),
    Picked(Top2),
    /// The largest logits with their ids, largest first.
    Candidates(Vec<(u32, f32)>),
}

/// Which backend a model is loaded onto.
#[derive(Clone)]
pub enum Target {
    Gpu(Arc<Gpu>),
    Cpu(crate::cpu::CpuOptions),
}

impl Target {
    /// "auto": the GPU on a hardware adapter; the CPU where there is no adapter or only a
    /// software one (llvmpipe, SwiftShader), which the CPU backend outruns.
    pub fn auto(gpu: Option<Gpu>, cpu: crate::cpu::CpuOptions) -> Self {
        match gpu {
            Some(gpu) if gpu.info.device_type != wgpu::DeviceType::Cpu => Target::Gpu(Arc::new(gpu)),
            _ => Target::Cpu(cpu),
        }
    }
}

/// What the engine computes on.
pub enum Backend {
    Gpu(Box<GpuBackend>),
    Cpu(Box<CpuBackend>),
}

/// Pages quantized for the spill tier, on their way back.
pub enum Captured {
    Gpu(GpuCaptured),
    Words(Vec<u32>),
}

/// What a backend says of itself, for `info` and the benchmarks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendInfo {
    /// "webgpu" (wgpu's backend beside it natively, e.g. "webgpu (vulkan)") or "cpu".
    pub backend: String,
    /// The adapter's name, or the CPU kernels' instruction set.
    pub device: String,
    /// Threads the CPU kernels run on (1 on a GPU: the engine's own).
    pub threads: usize,
}

impl BackendInfo {
    /// One line: "llvmpipe (LLVM 15.0.6, 256 bits) on webgpu (vulkan)", "cpu (avx2 SIMD, 2 threads)".
    pub fn describe(&self) -> String {
        if self.backend == "cpu" {
            format!("cpu ({}, {} thread{})", self.device, self.threads, if self.threads == 1 { "" } else { "s" })
        } else {
            format!("{} on {}", self.device, self.backend)
        }
    }
}

impl Backend {
    pub fn info(&self) -> BackendInfo {
        match self {
            Backend::Gpu(b) => BackendInfo {
                backend: if cfg!(target_arch = "wasm32") { "webgpu".into() } else { format!("webgpu ({:?})", b.gpu.info.backend).to_lowercase() },
                device: b.gpu.info.name.clone(),
                threads: 1,
            },
            Backend::Cpu(b) => BackendInfo { backend: "cpu".into(), device: format!("{} SIMD", crate::cpu::simd::NATIVE_NAME), threads: b.threads() },
        }
    }

    /// The device, where there is one (natively its queue is polled while futures wait).
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        match self {
            Backend::Gpu(b) => Some(&b.gpu),
            Backend::Cpu(_) => None,
        }
    }

    pub fn max_batch(&self) -> usize {
        match self {
            Backend::Gpu(b) => b.max_batch(),
            Backend::Cpu(b) => b.max_batch(),
        }
    }

    /// Whether [`Head::TopK`] is served (else sampling reads the logits).
    pub fn has_top_k(&self) -> bool {
        match self {
            Backend::Gpu(b) => b.has_top_k(),
            Backend::Cpu(_) => false,
        }
    }

    /// Fails when the device is gone (lost GPU).
    pub fn check(&self) -> Result<(), EngineError> {
        match self {
            Backend::Gpu(b) => Ok(b.gpu.check()?),
            Backend::Cpu(_) => Ok(()),
        }
    }

    /// Runs `tokens` at positions `start_pos..`, writing their K/V into the pages of
    /// `page_table` (which covers every position up to the last token). `stops`: the
    /// end-of-sequence ids a pick skips when asked to.
    pub async fn forward(&mut self, tokens: &[u32], start_pos: usize, page_table: &[u32], head: Head<'_>, stops: &[u32]) -> Result<HeadOut, EngineError> {
        match self {
            Backend::Gpu(b) => b.forward(tokens, start_pos, page_table, head).await,
            Backend::Cpu(b) => Ok(b.forward(tokens, start_pos, page_table, head, stops)?),
        }
    }

    /// The K and V values of page `page`, per layer K then V (the spill record's slices).
    pub async fn page_values(&self, cfg: &Config, page: u32) -> Result<Vec<Vec<f32>>, EngineError> {
        match self {
            Backend::Gpu(b) => b.page_values(cfg, page).await,
            Backend::Cpu(b) => Ok((0..2 * cfg.n_layers).map(|lk| b.page_values(lk, page)).collect()),
        }
    }

    /// Readies page quantization in `layout` (records of `record_words` words); returns the
    /// most pages one [`capture`](Self::capture) takes.
    pub fn prepare_spill(&mut self, cfg: &Config, layout: QuantLayout, record_words: usize) -> usize {
        match self {
            Backend::Gpu(b) => b.prepare_spill(cfg, layout, record_words),
            Backend::Cpu(_) => usize::MAX,
        }
    }

    /// Quantizes `pages` now, before anything can overwrite them: one record's words a page.
    pub fn capture(&mut self, layout: QuantLayout, pages: &[u32]) -> Option<Captured> {
        match self {
            Backend::Gpu(b) => b.capture(pages).map(Captured::Gpu),
            Backend::Cpu(b) => Some(Captured::Words(pages.iter().flat_map(|&p| b.quantize_page(layout, p)).collect())),
        }
    }

    pub async fn read_captured(&mut self, captured: Captured) -> Result<Vec<u32>, EngineError> {
        match (self, captured) {
            (Backend::Gpu(b), Captured::Gpu(c)) => b.read_captured(c).await,
            (_, Captured::Words(words)) => Ok(words),
            (Backend::Cpu(_), Captured::Gpu(_)) => Err(EngineError::Internal("a GPU capture on the CPU backend")),
        }
    }

    /// Takes back a capture that will not be read.
    pub fn drop_captured(&mut self, captured: Captured) {
        if let (Backend::Gpu(b), Captured::Gpu(c)) = (self, captured) {
            b.drop_captured(c);
        }
    }

    /// Copies pages' keys and values: (source, destination) pairs.
    pub fn copy_pages(&mut self, pairs: &[(u32, u32)]) {
        match self {
            Backend::Gpu(b) => b.copy_pages(pairs),
            Backend::Cpu(b) => b.copy_pages(pairs),
        }
    }

    /// Dequantizes `words` (one record's words a page) into `pages`.
    pub fn restore(&mut self, layout: QuantLayout, pages: &[u32], words: &[u32]) {
        match self {
            Backend::Gpu(b) => b.restore(pages, words),
            Backend::Cpu(b) => {
                let per_page = words.len() / pages.len().max(1);
                for (&page, words) in pages.iter().zip(words.chunks_exact(per_page.max(1))) {
                    b.restore_page(layout, page, words);
                }
            }
        }
    }
}
