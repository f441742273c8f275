//! The spill tier: KV pages quantized and kept outside the GPU (IndexedDB in the browser, a
//! directory natively), so a cached prefix survives eviction, reloads and restarts.
//!
//! `quant` is the CPU reference of the page quantization the GPU runs (`kv_quant.wgsl`);
//! `record` is the byte format of one stored page, verified on every read; `SpillStore` is the
//! storage behind a small trait, so the engine's policy (what to write, when to restore) is
//! the same on every platform.

pub mod quant;
mod lru;
pub mod record;
#[cfg(not(target_arch = "wasm32"))]
pub mod dir_store;
#[cfg(target_arch = "wasm32")]
pub mod idb_store;

use async_trait::async_trait;

pub use quant::QuantLayout;
pub use record::{RecordError, RecordShape, SpillRecord};

/// How pages are quantized on their way out of the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, tsify::Tsify)]
#[serde(rename_all = "lowercase")]
pub enum SpillFormat {
    /// 8-bit affine: about half an f16 page, and greedy output unchanged in our tests.
    Q8,
    /// 4-bit affine: about a quarter of an f16 page; small drift in long continuations.
    Q4,
}

impl SpillFormat {
    pub fn bits(self) -> u32 {
        match self {
            SpillFormat::Q8 => 8,
            SpillFormat::Q4 => 4,
        }
    }

    pub fn parse(name: &str) -> Option<SpillFormat> {
        match name {
            "q8" => Some(SpillFormat::Q8),
            "q4" => Some(SpillFormat::Q4),
            _ => None,
        }
    }
}

/// Largest quantization group: 64 values along the head dimension (one f16 step and minimum
/// per 64 values costs 6 % over 8-bit data).
pub const MAX_GROUP: usize = 64;

/// The group size for heads of `head_dim`: 64 where it divides the head, else the whole head
/// when that is small enough for one workgroup and packs into whole words (8 values); `None`
/// when neither holds, and such a model is not spilled.
pub fn group_size(head_dim: usize) -> Option<usize> {
    if head_dim % MAX_GROUP == 0 {
        Some(MAX_GROUP)
    } else if head_dim <= MAX_GROUP && head_dim % 8 == 0 {
        Some(head_dim)
    } else {
        None
    }
}

/// A record's key: the model it belongs to and the chained hash of its page (which names the
/// page and every token before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    pub fingerprint: u128,
    pub hash: u128,
}

/// What a store holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, tsify::Tsify)]
pub struct StoreStats {
    pub records: usize,
    pub bytes: u64,
    pub budget_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("spill store I/O: {0}")]
    Io(String),
    #[error("spill store is out of quota: {0}")]
    Quota(String),
}

/// Where spilled pages live. Every write of a record is atomic (it is visible whole or not at
/// all), and the store keeps itself within its byte budget by dropping its least recently used
/// records. Failures are values: the engine treats them as misses and never fails a request
/// because of its spill store.
#[async_trait(?Send)]
pub trait SpillStore {
    /// The records under `keys`, in order (`None` for a miss); each hit counts as a use for
    /// the store's LRU order.
    async fn get(&mut self, keys: &[RecordKey]) -> Result<Vec<Option<Vec<u8>>>, StoreError>;

    /// Stores `records` (each replacing one under the same key), evicting least recently used
    /// records to stay within budget; a record larger than the whole budget is not stored.
    /// Returns how many were stored.
    async fn put(&mut self, records: Vec<(RecordKey, Vec<u8>)>) -> Result<usize, StoreError>;

    async fn delete(&mut self, keys: &[RecordKey]) -> Result<(), StoreError>;

    /// Keys held for the model `fingerprint`, so the engine knows which pages need no write.
    async fn keys(&mut self, fingerprint: u128) -> Result<Vec<RecordKey>, StoreError>;

    /// Drops every record of the model `fingerprint`.
    async fn clear(&mut self, fingerprint: u128) -> Result<(), StoreError>;

    fn stats(&self) -> StoreStats;
}
