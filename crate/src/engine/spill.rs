//! The engine's side of the spill tier: pages leaving the backend's pool (and, written ahead,
//! the new full pages of every committed prefix) are quantized by the backend and read back
//! into records for the store; a prompt whose cache match ends where the store holds the
//! following pages gets them back, dequantized into its own fresh pages.
//!
//! Order is what keeps evicted data intact: a victim's quantization is submitted (on a GPU's
//! queue) or done (on the CPU) when it is evicted, before any work that writes the page's next
//! owner; reading the result back and writing the store happen later, off the request's
//! critical path.

use std::collections::HashSet;

use super::backend::{Backend, Captured};
use crate::kv::hash::chain_pages;
use crate::kv::spill::{group_size, QuantLayout, RecordKey, RecordShape, SpillFormat, SpillRecord, SpillStore, StoreStats};
use crate::kv::{CachedPage, PageHash, PrefixCache, Sequence};
use crate::model::Config;

/// What the spill tier did since the engine started.
#[derive(Debug, Clone, Default, serde::Serialize, tsify::Tsify)]
#[tsify(missing_as_null)]
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
#[derive(Debug, Clone, serde::Serialize, tsify::Tsify)]
pub struct SpillStats {
    pub format: SpillFormat,
    pub bytes_per_page: usize,
    pub store: StoreStats,
    pub pending_pages: usize,
    #[serde(flatten)]
    pub counters: SpillCounters,
}

/// Pages quantized by the backend, their words on their way back.
struct Pending {
    captured: Captured,
    pages: Vec<CachedPage<u32>>,
}

pub struct SpillTier {
    store: Box<dyn SpillStore>,
    shape: RecordShape,
    /// Most pages one capture takes (a GPU's staging size).
    batch_pages: usize,
    pending: Vec<Pending>,
    /// Hashes the store holds or will hold once `pending` is written: never captured twice,
    /// and the only pages a restore probes for.
    stored: HashSet<u128>,
    counters: SpillCounters,
}

impl SpillTier {
    /// The tier over `store` for this model and backend, or `None` when the model's head size
    /// has no quantization group (such a model runs without spilling).
    pub async fn new(backend: &mut Backend, cfg: &Config, page_size: usize, fingerprint: u128, format: SpillFormat, mut store: Box<dyn SpillStore>) -> Option<Self> {
        let layout = QuantLayout { format, group: group_size(cfg.head_dim)? };
        let shape = RecordShape { fingerprint, layout, page_size, n_layers: cfg.n_layers, kv_dim: cfg.kv_dim() };
        let batch_pages = backend.prepare_spill(cfg, layout, shape.payload_words());
        let mut counters = SpillCounters::default();
        let stored = match store.keys(fingerprint).await {
            Ok(keys) => keys.into_iter().map(|k| k.hash).collect(),
            Err(e) => {
                counters.store_errors += 1;
                counters.last_store_error = Some(e.to_string());
                HashSet::new()
            }
        };
        Some(Self { store, shape, batch_pages, pending: Vec::new(), stored, counters })
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

    /// Quantizes `pages` (those the store lacks) now, so they may be reused by any work after
    /// this; their records are written by the next [`flush`](Self::flush).
    pub fn capture(&mut self, backend: &mut Backend, pages: Vec<CachedPage<u32>>) {
        let mut fresh: Vec<CachedPage<u32>> = pages.into_iter().filter(|p| !self.stored.contains(&p.hash.0)).collect();
        fresh.dedup_by_key(|p| p.hash);
        for chunk in fresh.chunks(self.batch_pages) {
            let ids: Vec<u32> = chunk.iter().map(|p| p.page).collect();
            let Some(captured) = backend.capture(self.shape.layout, &ids) else { return };
            self.stored.extend(chunk.iter().map(|p| p.hash.0));
            self.pending.push(Pending { captured, pages: chunk.to_vec() });
        }
    }

    /// Writes ahead up to `max_pages` cached pages the store lacks (write-behind), prefixes
    /// first: captured, then flushed with whatever eviction captured. Returns whether more
    /// remain, so an idle loop can stop between batches when a request arrives.
    pub async fn write_behind(&mut self, backend: &mut Backend, cache: &PrefixCache, max_pages: usize) -> bool {
        let mut unsaved = cache.cached_pages_where(|h| !self.stored.contains(&h.0));
        let more = unsaved.len() > max_pages;
        unsaved.truncate(max_pages);
        self.capture(backend, unsaved);
        self.flush(backend).await;
        more
    }

    /// Reads back every captured batch and writes its records to the store.
    pub async fn flush(&mut self, backend: &mut Backend) {
        let record_words = self.shape.payload_words();
        for pending in std::mem::take(&mut self.pending) {
            let words = match backend.read_captured(pending.captured).await {
                Ok(words) => words,
                Err(e) => {
                    self.note_error(e.to_string());
                    self.forget(&pending.pages);
                    continue;
                }
            };
            let records: Vec<(RecordKey, Vec<u8>)> = pending
                .pages
                .iter()
                .zip(words.chunks_exact(record_words))
                .map(|(page, words)| {
                    let record = SpillRecord { hash: page.hash.0, parent: page.parent.0, tokens: page.tokens.clone(), payload: words.to_vec() };
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
    pub async fn restore(&mut self, backend: &mut Backend, root: PageHash, seq: &mut Sequence, prompt: &[u32]) -> usize {
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
        let words: Vec<u32> = records.iter().flat_map(|r| r.payload.iter().copied()).collect();
        backend.restore(self.shape.layout, pages, &words);
        let restored = records.len() * ps;
        seq.extend(&prompt[start..start + restored]);
        self.counters.tokens_restored += restored as u64;
        restored
    }

    /// Drops every record of this model, and whatever was on its way to the store.
    pub async fn clear(&mut self, backend: &mut Backend) {
        for pending in std::mem::take(&mut self.pending) {
            backend.drop_captured(pending.captured);
        }
        self.stored.clear();
        if let Err(e) = self.store.clear(self.shape.fingerprint).await {
            self.note_error(e.to_string());
        }
    }

    fn key(&self, hash: PageHash) -> RecordKey {
        RecordKey { fingerprint: self.shape.fingerprint, hash: hash.0 }
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
