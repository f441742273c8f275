//! The WebGPU backend: the model's weights in GPU buffers, the KV pool, the forward pass
//! (`forward`) and the spill tier's page quantization (`kv_quant.wgsl`), on one device.

use std::sync::Arc;

use super::context::Gpu;
use super::forward::Forward;
use super::kv_pool::KvPool;
use super::model_weights::ModelWeights;
use super::ops::{KernelShapes, KvQuant, KvQuantBinding, SpillParams};
use super::readback::{map_read, read_u32, work_done};
use crate::engine::backend::{Head, HeadOut};
use crate::engine::sampling::Top2;
use crate::engine::EngineError;
use crate::kv::spill::QuantLayout;
use crate::model::Config;

/// Bytes of packed pages one GPU batch moves: a few MiB keeps staging buffers small on phones.
const SPILL_BATCH_BYTES: usize = 8 << 20;

pub struct GpuBackend {
    pub gpu: Arc<Gpu>,
    /// Owned here so the weights live as long as the bind groups that read them.
    _weights: ModelWeights,
    /// The KV pages the forward pass's bind groups read and write.
    pool: KvPool,
    forward: Forward,
    quant: Option<PageQuant>,
    /// The final logits' soft cap, applied to what is read back (`Config::cap_logits`).
    cfg: Config,
}

/// Pages quantized on the GPU, their packed words on their way to a staging buffer.
pub struct Captured {
    staging: wgpu::Buffer,
    bytes: u64,
}

impl GpuBackend {
    /// The KV pool (`n_pages` pages, already clamped to the device by [`KvPool::pages_for`])
    /// and the forward pass over `weights`, under an allocation scope that turns out-of-memory
    /// into an error.
    pub async fn new(gpu: Arc<Gpu>, cfg: &Config, weights: ModelWeights, page_size: usize, n_pages: usize, shapes: Option<KernelShapes>, max_batch: usize, max_pages: usize, banned: &[u32]) -> Result<Self, EngineError> {
        super::ops::attention_paged::check_shape(cfg)?;
        let alloc = gpu.alloc_scope("the KV cache and activations");
        let pool = KvPool::new(&gpu, cfg, page_size, n_pages);
        let shapes = shapes.unwrap_or_else(|| KernelShapes::for_adapter(&gpu));
        let forward = Forward::new(&gpu, cfg, &weights, &pool, shapes, max_batch, max_pages, banned);
        alloc.finish().await?;
        let forward = forward?;
        gpu.check()?;
        Ok(Self { gpu, _weights: weights, pool, forward, quant: None, cfg: cfg.clone() })
    }

    pub fn max_batch(&self) -> usize {
        self.forward.max_batch
    }

    pub fn has_top_k(&self) -> bool {
        self.forward.has_gpu_top_k()
    }

    pub async fn forward(&mut self, tokens: &[u32], start_pos: usize, pages: &[u32], head: Head<'_>) -> Result<HeadOut, EngineError> {
        let gpu = &self.gpu;
        let out = match head {
            Head::None => {
                self.forward.run(gpu, tokens, start_pos, pages).await?;
                // The step takes as long as its work, so an abort between steps lands after it.
                work_done(gpu).await?;
                HeadOut::None
            }
            // The soft cap is monotonic: the GPU picks and ranks uncapped logits, and the
            // values read back are capped here.
            Head::Logits => {
                let mut logits = self.forward.run_logits(gpu, tokens, start_pos, pages).await?;
                self.cfg.cap_logits(&mut logits);
                HeadOut::Logits(logits)
            }
            Head::Greedy(pick) => {
                let top2 = self.forward.run_greedy(gpu, tokens, start_pos, pages, pick).await?;
                HeadOut::Picked(Top2 { best: self.cfg.cap_logit(top2.best), second: self.cfg.cap_logit(top2.second), ..top2 })
            }
            Head::TopK(pick) => {
                let candidates = self.forward.run_top_k(gpu, tokens, start_pos, pages, pick).await?;
                HeadOut::Candidates(candidates.into_iter().map(|(id, l)| (id, self.cfg.cap_logit(l))).collect())
            }
        };
        gpu.check()?;
        Ok(out)
    }

    /// Profiles every forward pass from now on, or stops and returns what was measured.
    pub fn profile(&mut self, on: bool) -> Result<Vec<super::profile::PassProfile>, EngineError> {
        let done = self.forward.profiler.take().map(|p| p.passes).unwrap_or_default();
        if on {
            let profiler = super::profile::Profiler::new(&self.gpu, self.forward.max_ops())
                .ok_or(EngineError::Gpu(super::GpuError::NoTimestamps(self.gpu.info.name.clone())))?;
            self.forward.profiler = Some(profiler);
        }
        Ok(done)
    }

    /// The K and V values of pool page `page`, per layer K then V.
    pub async fn page_values(&self, cfg: &Config, page: u32) -> Result<Vec<Vec<f32>>, EngineError> {
        let words = (self.pool.page_size * cfg.kv_dim() / 2) as u64;
        let mut slices = Vec::with_capacity(2 * cfg.n_layers);
        for (k, v) in self.pool.k.iter().zip(&self.pool.v) {
            for buf in [k, v] {
                let pairs = read_u32(&self.gpu, buf, page as u64 * words, words).await?;
                slices.push(pairs.iter().flat_map(|w| [*w as u16, (*w >> 16) as u16]).map(|h| half::f16::from_bits(h).to_f32()).collect());
            }
        }
        Ok(slices)
    }

    /// Sets up page quantization in `layout`; returns the most pages one capture takes.
    pub fn prepare_spill(&mut self, cfg: &Config, layout: QuantLayout, record_words: usize) -> usize {
        let quant = self.quant.get_or_insert_with(|| PageQuant::new(&self.gpu, cfg, &self.pool, layout, record_words));
        quant.batch_pages
    }

    /// Quantizes `pages` (at most `prepare_spill`'s count) now: work submitted after this
    /// may reuse them. Their words come back through [`read_captured`](Self::read_captured).
    pub fn capture(&mut self, pages: &[u32]) -> Option<Captured> {
        let quant = self.quant.as_mut()?;
        Some(quant.capture(&self.gpu, pages))
    }

    pub async fn read_captured(&mut self, captured: Captured) -> Result<Vec<u32>, EngineError> {
        let bytes = map_read(&self.gpu, &captured.staging, captured.bytes).await?;
        if let Some(quant) = &mut self.quant {
            quant.staging_free.push(captured.staging);
        }
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Takes back a capture that will not be read.
    pub fn drop_captured(&mut self, captured: Captured) {
        if let Some(quant) = &mut self.quant {
            quant.staging_free.push(captured.staging);
        }
    }

    /// Copies pages' keys and values, every layer's: (source, destination) pairs.
    pub fn copy_pages(&mut self, pairs: &[(u32, u32)]) {
        if pairs.is_empty() {
            return;
        }
        let page_bytes = self.pool.page_bytes_per_layer();
        // WebGPU copies between two buffers only: through a page-sized one.
        let scratch = self.gpu.storage("kv.copy_pages", page_bytes);
        let mut enc = self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kv.copy_pages") });
        for buf in self.pool.k.iter().chain(&self.pool.v) {
            for &(src, dst) in pairs {
                enc.copy_buffer_to_buffer(buf, src as u64 * page_bytes, &scratch, 0, page_bytes);
                enc.copy_buffer_to_buffer(&scratch, 0, buf, dst as u64 * page_bytes, page_bytes);
            }
        }
        self.gpu.queue.submit([enc.finish()]);
    }

    /// Dequantizes `words` (whole records, one per page) into `pages`.
    pub fn restore(&mut self, pages: &[u32], words: &[u32]) {
        if let Some(quant) = &self.quant {
            quant.restore(&self.gpu, pages, words);
        }
    }
}

/// The spill tier's quantization kernels over the pool: one binding per record slice (layer ·
/// 2 + K/V), over that layer's pool buffer.
struct PageQuant {
    quant: KvQuant,
    bindings: Vec<KvQuantBinding>,
    _params: Vec<wgpu::Buffer>,
    batch: wgpu::Buffer,  // (1 + batch_pages) u32: count, page ids
    packed: wgpu::Buffer, // (batch_pages, record words) u32
    batch_pages: usize,
    record_bytes: usize,
    staging_free: Vec<wgpu::Buffer>,
}

impl PageQuant {
    fn new(gpu: &Gpu, cfg: &Config, pool: &KvPool, layout: QuantLayout, record_words: usize) -> Self {
        let record_bytes = record_words * 4;
        let batch_pages = (SPILL_BATCH_BYTES / record_bytes).clamp(1, pool.n_pages);
        let quant = KvQuant::new(gpu, layout, pool.page_size * cfg.kv_dim(), 2 * cfg.n_layers);
        let batch = gpu.storage("spill.batch", (1 + batch_pages as u64) * 4);
        let packed = gpu.storage("spill.packed", (batch_pages * record_bytes) as u64);
        let mut params = Vec::new();
        let mut bindings = Vec::new();
        for (layer, (k, v)) in pool.k.iter().zip(&pool.v).enumerate() {
            for (kind, buf) in [k, v].into_iter().enumerate() {
                let p = gpu.uniform("spill.params", &SpillParams { lk: (2 * layer + kind) as u32, _pad: [0; 3] });
                bindings.push(quant.bind(gpu, &p, &batch, buf, &packed));
                params.push(p);
            }
        }
        Self { quant, bindings, _params: params, batch, packed, batch_pages, record_bytes, staging_free: Vec::new() }
    }

    fn capture(&mut self, gpu: &Gpu, pages: &[u32]) -> Captured {
        self.write_batch(gpu, pages);
        let bytes = (pages.len() * self.record_bytes) as u64;
        let staging = self.staging_free.pop().unwrap_or_else(|| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("spill.staging"),
                size: (self.batch_pages * self.record_bytes) as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("spill.quantize") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("spill.quantize"), timestamp_writes: None });
            for binding in &self.bindings {
                self.quant.encode_quantize(&mut pass, binding, pages.len() as u32);
            }
        }
        enc.copy_buffer_to_buffer(&self.packed, 0, &staging, 0, bytes);
        gpu.queue.submit([enc.finish()]);
        Captured { staging, bytes }
    }

    fn restore(&self, gpu: &Gpu, pages: &[u32], words: &[u32]) {
        let record_words = self.record_bytes / 4;
        for (chunk, page_ids) in words.chunks(self.batch_pages * record_words).zip(pages.chunks(self.batch_pages)) {
            gpu.queue.write_buffer(&self.packed, 0, bytemuck::cast_slice(chunk));
            self.write_batch(gpu, page_ids);
            let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("spill.dequantize") });
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("spill.dequantize"), timestamp_writes: None });
                for binding in &self.bindings {
                    self.quant.encode_dequantize(&mut pass, binding, page_ids.len() as u32);
                }
            }
            gpu.queue.submit([enc.finish()]);
        }
    }

    fn write_batch(&self, gpu: &Gpu, pages: &[u32]) {
        let mut list = Vec::with_capacity(1 + pages.len());
        list.push(pages.len() as u32);
        list.extend_from_slice(pages);
        gpu.queue.write_buffer(&self.batch, 0, bytemuck::cast_slice(&list));
    }
}
