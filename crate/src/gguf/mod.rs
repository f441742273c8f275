//! GGUF: the container format of llama.cpp models.
//!
//! `reader` parses a file held in memory into a metadata map and a tensor table whose
//! tensors are zero-copy views of the bytes; `blocks` knows the block formats and
//! dequantizes them on the CPU (the reference the GPU kernels are tested against);
//! `writer` builds GGUF files for synthetic test models.

pub mod blocks;
pub mod reader;
pub mod writer;

pub use blocks::GgmlType;
pub use reader::{GgufError, GgufFile, GgufHeader, MetaValue, TensorInfo, TensorView};
pub use writer::GgufWriter;
