//! The KV cache: page ids (`alloc`), chained page hashes (`hash`), the radix tree that shares
//! cached prefixes between sequences (`radix`) and the bookkeeping of sequences over them
//! (`cache`) know nothing of where the pages live: each backend keeps them in its own memory
//! (GPU buffers, or host memory) in the layout below.

pub mod alloc;
pub mod cache;
pub mod hash;
pub mod radix;
pub mod spill;

pub use alloc::{AllocError, PageAllocator};
pub use cache::{CacheError, CacheStats, PrefixCache, Sequence};
pub use hash::{chain, chain_pages, PageHash};
pub use radix::{CachedPage, InsertResult, NodeId, PrefixMatch, RadixError, RadixStats, RadixTree};

use crate::model::Config;

/// Tokens per page. 16 keeps the unshared tail of a prompt (recomputed on a cache hit) short
/// while page tables stay small.
pub const DEFAULT_PAGE_SIZE: usize = 16;

/// Bytes one page takes across all layers, K and V, stored as f16: per layer, a page is
/// (page_size, n_kv_heads · head_dim) f16 values, K and V apart.
pub fn page_bytes(cfg: &Config, page_size: usize) -> u64 {
    (cfg.n_layers * 2 * page_size * cfg.kv_dim() * 2) as u64
}
