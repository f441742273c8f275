//! One typed dispatcher per WGSL kernel file. Each op is built once for its static shape
//! (`new`), binds its buffers once (`bind`, buffers allocated at the maximum batch) and encodes
//! into a compute pass per step (`encode`, workgroup counts from `n_tokens`; the kernels also
//! bound-check against the step's `n_tokens`).

pub mod attention_paged;
pub mod embed;
pub mod kv_quant;
pub mod matmul;
pub mod rmsnorm;
pub mod silu_mul;
pub mod top2;
pub mod topk;

pub use attention_paged::{AttentionPaged, AttentionPagedBinding, AttentionPlan, AttentionShape, SplitParams};
pub use embed::{Embed, EmbedBinding};
pub use kv_quant::{KvQuant, KvQuantBinding, SpillParams};
pub use matmul::{AttentionInput, DecodeShape, Matmul, MatmulBinding};
pub use rmsnorm::{RmsNorm, RmsNormBinding};
pub use silu_mul::{SiluMul, SiluMulBinding};
pub use top2::{PickParams, Top2, Top2Binding, Top2Op, TOP2_BYTES};
pub use topk::{TopKBinding, TopKOp, MAX_TOP_K, TOPK_BYTES};

use super::pipelines::Kernel;

/// The shape of each kernel with variants: shaped for real GPUs by default, for the CPU on CPU
/// adapters (llvmpipe, SwiftShader), where workgroup barriers and non-uniform loads are slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelShapes {
    pub decode: DecodeShape,
    pub attention: AttentionShape,
    /// Sampling with top-k: the candidates chosen on the GPU (`TopKOp`), or on the CPU from
    /// the logits read back (CPU adapters: a bitonic sort's barriers cost more than the copy).
    pub gpu_top_k: bool,
}

impl KernelShapes {
    /// The real-GPU shapes, whatever the adapter (tests run them on CPU adapters too).
    pub const GPU: Self = Self { decode: DecodeShape::Wide, attention: AttentionShape::Tiled, gpu_top_k: true };
    pub const CPU: Self = Self { decode: DecodeShape::Rows, attention: AttentionShape::Lanes, gpu_top_k: false };

    /// The one place the adapter's type picks the shapes.
    pub fn for_adapter(info: &wgpu::AdapterInfo) -> Self {
        if info.device_type == wgpu::DeviceType::Cpu { Self::CPU } else { Self::GPU }
    }
}

/// A kernel file after common.wgsl and the shared WGSL files it names (in shaders-wgsl/).
macro_rules! wgsl {
    ($file:literal $(, $shared:literal)*) => {
        concat!(
            include_str!("../../../../shaders-wgsl/common.wgsl"),
            $(include_str!(concat!("../../../../shaders-wgsl/", $shared)),)*
            include_str!(concat!("../../../../shaders-wgsl/", $file))
        )
    };
}
pub(crate) use wgsl;

/// Every kernel with its file name, for validation.
pub const KERNELS: &[(&str, &Kernel)] = &[
    ("attention_paged.wgsl", &attention_paged::KERNEL),
    ("embed.wgsl", &embed::KERNEL),
    ("kv_quant.wgsl", &kv_quant::KERNEL),
    ("matmul.wgsl", &matmul::KERNEL),
    ("rmsnorm.wgsl", &rmsnorm::KERNEL),
    ("silu_mul.wgsl", &silu_mul::KERNEL),
    ("top2.wgsl", &top2::KERNEL),
    ("topk.wgsl", &topk::KERNEL),
];
