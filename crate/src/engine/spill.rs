//! The engine's side of the spill tier: pages leaving the GPU (and, written ahead, the new full
//! pages of every committed prefix) are quantized on the GPU and read back into records for
//! the store; a prompt whose GPU match ends where the store holds the following pages gets
//! them back, uploaded and dequantized into its own fresh pages.
//!
//! Order on the queue is what keeps evicted data intact: a victim's quantization is submitted
//! when it is evicted, before any work that writes the page's next owner; reading the result
//! back and writing the store happen later, off the request's critical path.

use std::collections::HashSet;

use crate::gpu::context::Gpu;
use crate::gpu::ops::{KvQuant, KvQuantBinding, SpillParams};
use crate::gpu::readback::map_read;
use crate::kv::hash::chain_pages;
use crate::kv::pool::KvPool;
use crate::kv::spill::{group_size, QuantLayout, RecordKey, RecordShape, SpillFormat, SpillRecord, SpillStore, StoreStats};
use crate::kv::{CachedPage, PageHash, PrefixCache, Sequence};
use crate::model::Config;

/// Bytes of packed pages one GPU batch moves: a few MiB keeps staging buffers small on phones.
const BATCH_BYTES: usize = 8 << 20;

/// What the spill tier did since the engine started.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SpillCounters {
    pub records_written: u64,
    pub tokens_restored: u64,
    /// Records that failed verification (corrupt, another model or format): deleted, missed.
    pub records_rejected: u64,
    /// Store operations that failed; each cost a write or a hit, never a request.
    pub store_errors: u64,
    pub last_store_error: Option<String>,
}

/// The spill tier's state for `cache.stats()`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpillStats {
    pub format: SpillFormat,
    pub bytes_per_page: usize,
    pub store: StoreStats,
    pub pending_pages: usize,
    #[serde(flatten)]
    pub counters: SpillCounters,
}

/// Pages quantized on the GPU, their packed words on their way to `staging`.
struct Pending {
    staging: wgpu::Buffer,
    pages: Vec<CachedPage<u32>>,
}

pub struct SpillTier {
    store: Box<dyn SpillStore>,
    shape: RecordShape,
    quant: KvQuant,
    /// One per record slice (layer · 2 + K/V), over that layer's pool buffer.
    bindings: Vec<KvQuantBinding>,
    _params: Vec<wgpu::Buffer>,
    batch: wgpu::Buffer,  // (1 + batch_pages) u32: count, page ids
    packed: wgpu::Buffer, // (batch_pages, record words) u32
    batch_pages: usize,
    staging_free: Vec<wgpu::Buffer>,
    pending: Vec<Pending>,
    /// Hashes the store holds or will hold once `pending` is written: never captured twice,
    /// and the only pages a restore probes for.
    stored: HashSet<u128>,
    counters: SpillCounters,
}

impl SpillTier {
    /// The tier over `store` for this model and pool, or `None` when the model's head size has
    /// no quantization group (such a model runs without spilling).
    pub async fn new(gpu: &Gpu, cfg: &Config, pool: &KvPool, fingerprint: u128, format: SpillFormat, mut store: Box<dyn SpillStore>) -> Option<Self> {
        let layout = QuantLayout { format, group: group_size(cfg.head_dim)? };
        let shape = RecordShape { fingerprint, layout, page_size: pool.page_size, n_layers: cfg.n_layers, kv_dim: cfg.kv_dim() };
        let record_bytes = shape.payload_words() * 4;
        let batch_pages = (BATCH_BYTES / record_bytes).clamp(1, pool.n_pages);
        let page_values = pool.page_size * cfg.kv_dim();
        let quant = KvQuant::new(gpu, layout, page_values, 2 * cfg.n_layers);
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
        let mut counters = SpillCounters::default();
        let stored = match store.keys(fingerprint).await {
            Ok(keys) => keys.into_iter().map(|k| k.hash).collect(),
            Err(e) => {
                counters.store_errors += 1;
                counters.last_store_error = Some(e.to_string());
                HashSet::new()
            }
        };
        Some(Self { store, shape, quant, bindings, _params: params, batch, packed, batch_pages, staging_free: Vec::new(), pending: Vec::new(), stored, counters })
    }

    pub fn stats(&self) -> SpillStats {
        SpillStats {
            format: self.shape.layout.format,
            bytes_per_page: self.shape.payload_words() * 4,
            store: self.store.stats(),
            pending_pages: self.pending.iter().map(|p| p.pages.len()).sum(),
            counters: self.counters.clone(),
        }
    }

    /// Quantizes `pages` (those the store lacks) on the GPU now, so they may be reused by any
    /// work submitted after this; their records are written by the next [`flush`](Self::flush).
    pub fn capture(&mut self, gpu: &Gpu, pages: Vec<CachedPage<u32>>) {
        let mut fresh: Vec<CachedPage<u32>> = pages.into_iter().filter(|p| !self.stored.contains(&p.hash.0)).collect();
        fresh.dedup_by_key(|p| p.hash);
        let record_bytes = (self.shape.payload_words() * 4) as u64;
        for chunk in fresh.chunks(self.batch_pages) {
            self.write_batch(gpu, chunk.iter().map(|p| p.page));
            let bytes = chunk.len() as u64 * record_bytes;
            let staging = self.staging_free.pop().unwrap_or_else(|| {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("spill.staging"),
                    size: self.batch_pages as u64 * record_bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            });
            let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("spill.quantize") });
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("spill.quantize"), timestamp_writes: None });
                for binding in &self.bindings {
                    self.quant.encode_quantize(&mut pass, binding, chunk.len() as u32);
                }
            }
            enc.copy_buffer_to_buffer(&self.packed, 0, &staging, 0, bytes);
            gpu.queue.submit([enc.finish()]);
            self.stored.extend(chunk.iter().map(|p| p.hash.0));
            self.pending.push(Pending { staging, pages: chunk.to_vec() });
        }
    }

    /// Writes ahead up to `max_pages` cached pages the store lacks (write-behind), prefixes
    /// first: captured, then flushed with whatever eviction captured. Returns whether more
    /// remain, so an idle loop can stop between batches when a request arrives.
    pub async fn write_behind(&mut self, gpu: &Gpu, cache: &PrefixCache, max_pages: usize) -> bool {
        let mut unsaved = cache.cached_pages_where(|h| !self.stored.contains(&h.0));
        let more = unsaved.len() > max_pages;
        unsaved.truncate(max_pages);
        self.capture(gpu, unsaved);
        self.flush(gpu).await;
        more
    }

    /// Reads back every captured batch and writes its records to the store.
    pub async fn flush(&mut self, gpu: &Gpu) {
        let record_bytes = self.shape.payload_words() * 4;
        for pending in std::mem::take(&mut self.pending) {
            let len = (pending.pages.len() * record_bytes) as u64;
            let words = match map_read(gpu, &pending.staging, len).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.note_error(e.to_string());
                    self.forget(&pending.pages);
                    continue;
                }
            };
            self.staging_free.push(pending.staging);
            let records: Vec<(RecordKey, Vec<u8>)> = pending
                .pages
                .iter()
                .zip(words.chunks_exact(record_bytes))
                .map(|(page, bytes)| {
                    let record = SpillRecord { hash: page.hash.0, parent: page.parent.0, tokens: page.tokens.clone(), payload: bytemuck::pod_collect_to_vec(bytes) };
                    (self.key(page.hash), record.encode(&self.shape))
                })
                .collect();
            match self.store.put(records).await {
                Ok(n) => self.counters.records_written += n as u64,
                Err(e) => {
                    self.note_error(e.to_string());
                    self.forget(&pending.pages);
                }
            }
        }
        // Records the store dropped for its budget are misses now; keep the set honest.
        if let Ok(keys) = self.store.keys(self.shape.fingerprint).await {
            self.stored = keys.into_iter().map(|k| k.hash).collect();
        }
    }

    /// Continues `seq` over `prompt` from the store: the whole pages after what `seq` holds,
    /// up to the prompt's last token (always computed), as long as the store has them and each
    /// record verifies. Their KV is dequantized into `seq`'s own pages (reserved already by
    /// the caller for the whole prompt). Returns the tokens restored.
    pub async fn restore(&mut self, gpu: &Gpu, root: PageHash, seq: &mut Sequence, prompt: &[u32]) -> usize {
        let ps = self.shape.page_size;
        let start = seq.len();
        let limit = prompt.len().saturating_sub(1) / ps * ps;
        if start % ps != 0 || start >= limit {
            return 0;
        }
        let hashes = chain_pages(root, &prompt[..limit], ps);
        let first = start / ps;
        let wanted: Vec<usize> = (first..hashes.len()).take_while(|&i| self.stored.contains(&hashes[i].0)).collect();
        if wanted.is_empty() {
            return 0;
        }
        let keys: Vec<RecordKey> = wanted.iter().map(|&i| self.key(hashes[i])).collect();
        let found = match self.store.get(&keys).await {
            Ok(found) => found,
            Err(e) => {
                self.note_error(e.to_string());
                return 0;
            }
        };
        let mut records = Vec::new();
        for ((&i, key), bytes) in wanted.iter().zip(&keys).zip(found) {
            let parent = if i == 0 { root } else { hashes[i - 1] };
            let tokens = &prompt[i * ps..(i + 1) * ps];
            let Some(bytes) = bytes else {
                self.stored.remove(&key.hash);
                break;
            };
            match SpillRecord::decode(&bytes, &self.shape, key.hash, parent.0, tokens) {
                Ok(record) => records.push(record),
                Err(_) => {
                    self.counters.records_rejected += 1;
                    self.stored.remove(&key.hash);
                    if let Err(e) = self.store.delete(&[*key]).await {
                        self.note_error(e.to_string());
                    }
                    break;
                }
            }
        }
        let pages = &seq.pages()[first..first + records.len()];
        for (chunk, page_ids) in records.chunks(self.batch_pages).zip(pages.chunks(self.batch_pages)) {
            let words: Vec<u32> = chunk.iter().flat_map(|r| r.payload.iter().copied()).collect();
            gpu.queue.write_buffer(&self.packed, 0, bytemuck::cast_slice(&words));
            self.write_batch(gpu, page_ids.iter().copied());
            let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("spill.dequantize") });
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("spill.dequantize"), timestamp_writes: None });
                for binding in &self.bindings {
                    self.quant.encode_dequantize(&mut pass, binding, chunk.len() as u32);
                }
            }
            gpu.queue.submit([enc.finish()]);
        }
        let restored = records.len() * ps;
        seq.extend(&prompt[start..start + restored]);
        self.counters.tokens_restored += restored as u64;
        restored
    }

    /// Drops every record of this model, and whatever was on its way to the store.
    pub async fn clear(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            self.staging_free.push(pending.staging);
        }
        self.stored.clear();
        if let Err(e) = self.store.clear(self.shape.fingerprint).await {
            self.note_error(e.to_string());
        }
    }

    fn key(&self, hash: PageHash) -> RecordKey {
        RecordKey { fingerprint: self.shape.fingerprint, hash: hash.0 }
    }

    fn write_batch(&self, gpu: &Gpu, pages: impl Iterator<Item = u32>) {
        let mut list = vec![0u32];
        list.extend(pages);
        list[0] = (list.len() - 1) as u32;
        gpu.queue.write_buffer(&self.batch, 0, bytemuck::cast_slice(&list));
    }

    fn forget(&mut self, pages: &[CachedPage<u32>]) {
        for page in pages {
            self.stored.remove(&page.hash.0);
        }
    }

    fn note_error(&mut self, error: String) {
        self.counters.store_errors += 1;
        self.counters.last_store_error = Some(error);
    }
}
