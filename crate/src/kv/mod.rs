//! The KV cache: page ids (`alloc`), chained page hashes (`hash`), the radix tree that shares
//! cached prefixes between sequences (`radix`) and the bookkeeping of sequences over them
//! (`cache`) know nothing of the GPU; `pool` holds the pages themselves in per-layer buffers.

pub mod alloc;
pub mod cache;
pub mod hash;
pub mod pool;
pub mod radix;
pub mod spill;

pub use alloc::{AllocError, PageAllocator};
pub use cache::{CacheError, CacheStats, PrefixCache, Sequence};
pub use hash::{chain, chain_pages, PageHash};
pub use radix::{CachedPage, InsertResult, NodeId, PrefixMatch, RadixError, RadixStats, RadixTree};
