//! KV cache bookkeeping: page ids (`alloc`), chained page hashes (`hash`) and the radix tree
//! that shares cached prefixes between sequences (`radix`). Nothing here knows the GPU.

pub mod alloc;
pub mod hash;
pub mod radix;

pub use alloc::{AllocError, PageAllocator};
pub use hash::{chain, chain_pages, PageHash};
pub use radix::{InsertResult, NodeId, PrefixMatch, RadixError, RadixStats, RadixTree};
