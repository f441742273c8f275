//! One typed dispatcher per WGSL kernel file. Each op is built once for its static shape
//! (`new`), binds its buffers once (`bind`, buffers allocated at the maximum batch) and encodes
//! into a compute pass per step (`encode`, workgroup counts from `n_tokens`; the kernels also
//! bound-check against the step's `n_tokens`).

pub mod matmul;

pub use matmul::{Matmul, MatmulBinding};

use super::pipelines::Kernel;

/// Prepends the shared WGSL files to a kernel file (paths relative to this directory).
macro_rules! wgsl {
    ($file:literal) => {
        concat!(include_str!("../../../../shaders-wgsl/common.wgsl"), include_str!(concat!("../../../../shaders-wgsl/", $file)))
    };
    ($file:literal, blocks) => {
        concat!(
            include_str!("../../../../shaders-wgsl/common.wgsl"),
            include_str!("../../../../shaders-wgsl/blocks.wgsl"),
            include_str!(concat!("../../../../shaders-wgsl/", $file))
        )
    };
}
pub(crate) use wgsl;

/// Every kernel with its file name, for validation.
pub const KERNELS: &[(&str, &Kernel)] = &[
    ("matmul.wgsl", &matmul::KERNEL),
];
