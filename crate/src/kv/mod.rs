//! The KV cache: page ids (`alloc`), chained page hashes (`hash`) and the radix tree that
//! shares cached prefixes between sequences (`radix`) know nothing of the GPU; `pool` holds the
//! pages themselves in per-layer GPU buffers.

pub mod alloc;
pub mod hash;
pub mod pool;
pub mod radix;

pub use alloc::{AllocError, PageAllocator};
pub use hash::{chain, chain_pages, PageHash};
pub use radix::{InsertResult, NodeId, PrefixMatch, RadixError, RadixStats, RadixTree};
