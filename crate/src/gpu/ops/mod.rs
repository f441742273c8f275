//! One typed dispatcher per WGSL kernel file. Each op is built once for its static shape
//! (`new`), binds its buffers once (`bind`, buffers allocated at the maximum batch) and encodes
//! into a compute pass per step (`encode`, workgroup counts from `n_tokens`; the kernels also
//! bound-check against the step's `n_tokens`).

pub mod attention_paged;
pub mod embed;
pub mod kv_quant;
pub mod matmul;
pub mod qk_norm;
pub mod rmsnorm;
pub mod glu;
pub mod top2;
pub mod topk;

pub use attention_paged::{AttentionMask, AttentionPaged, AttentionPagedBinding, AttentionPlan, AttentionShape, SplitParams};
pub use embed::{Embed, EmbedBinding};
pub use kv_quant::{KvQuant, KvQuantBinding, SpillParams};
pub use matmul::{reads_two_types, AttentionInput, BlockLanes, Matmul, MatmulBinding, MatmulShape, RopeTable};
pub use qk_norm::{QkNorm, QkNormBinding};
pub use rmsnorm::{RmsNorm, RmsNormBinding};
pub use glu::{Glu, GluBinding};
pub use top2::{PickParams, Top2, Top2Binding, Top2Op, TOP2_BYTES};
pub use topk::{TopKBinding, TopKOp, MAX_TOP_K, TOPK_BYTES};

use super::pipelines::Kernel;
use super::Gpu;

/// The shape of each kernel with variants: shaped for real GPUs by default, for the CPU on CPU
/// adapters (llvmpipe, SwiftShader), where workgroup barriers and non-uniform loads are slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelShapes {
    pub matmul: MatmulShape,
    pub attention: AttentionShape,
    /// Sampling with top-k: the candidates chosen on the GPU (`TopKOp`), or on the CPU from
    /// the logits read back (CPU adapters: a bitonic sort's barriers cost more than the copy).
    pub gpu_top_k: bool,
}

impl KernelShapes {
    /// The real-GPU shapes, whatever the adapter (tests run them on CPU adapters too).
    pub const GPU: Self = Self { matmul: MatmulShape::WIDE, attention: AttentionShape::Tiled, gpu_top_k: true };
    pub const CPU: Self = Self { matmul: MatmulShape::Rows, attention: AttentionShape::Lanes, gpu_top_k: false };

    /// The real-GPU shapes, with the prefill tiles in f16 where the device has shader-f16 and
    /// decode's sums added by subgroup operations where it has those.
    pub fn for_gpu(gpu: &Gpu) -> Self {
        let features = gpu.device.features();
        let matmul = MatmulShape::Wide { f16_tiles: features.contains(wgpu::Features::SHADER_F16), subgroups: features.contains(wgpu::Features::SUBGROUP) };
        Self { matmul, ..Self::GPU }
    }

    /// The one place the adapter picks the shapes: its type, then its features.
    pub fn for_adapter(gpu: &Gpu) -> Self {
        if gpu.info.device_type == wgpu::DeviceType::Cpu { Self::CPU } else { Self::for_gpu(gpu) }
    }
}

/// A kernel file after common.wgsl and the shared WGSL files it names (in shaders-wgsl/); with
/// `enable f16;` first, a module that uses shader-f16.
macro_rules! wgsl {
    (enable f16; $file:literal $(, $shared:literal)*) => {
        concat!("enable f16;\n", wgsl!($file $(, $shared)*))
    };
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
    ("matmul.wgsl", &matmul::KERNEL_F16),
    ("matmul.wgsl", &matmul::KERNEL_SUBGROUP),
    ("matvec_blocks.wgsl", &matmul::KERNEL_BLOCKS),
    ("qk_norm.wgsl", &qk_norm::KERNEL),
    ("rmsnorm.wgsl", &rmsnorm::KERNEL),
    ("glu.wgsl", &glu::KERNEL),
    ("top2.wgsl", &top2::KERNEL),
    ("topk.wgsl", &topk::KERNEL),
];
