//! The model's weights on the GPU, uploaded in their GGUF block formats.

use crate::gguf::GgufHeader;
use crate::gpu::context::Gpu;
use crate::gpu::weights::GpuWeight;
use crate::model::{Config, ModelError};

use super::EngineError;

pub struct LayerWeights {
    pub attn_norm: wgpu::Buffer, // (C) f32
    pub wq: GpuWeight,           // (C rows of C)
    pub wk: GpuWeight,           // (Hkv·D rows of C)
    pub wv: GpuWeight,           // (Hkv·D rows of C)
    pub wo: GpuWeight,           // (C rows of C)
    pub ffn_norm: wgpu::Buffer,  // (C) f32
    pub w_gate: GpuWeight,       // (F rows of C)
    pub w_up: GpuWeight,         // (F rows of C)
    pub w_down: GpuWeight,       // (C rows of F)
}

pub struct ModelWeights {
    pub token_embd: GpuWeight,    // (V rows of C)
    pub output_norm: wgpu::Buffer, // (C) f32
    /// The LM head: `output.weight`, or the token embedding when tied.
    pub output: Option<GpuWeight>, // (V rows of C)
    pub layers: Vec<LayerWeights>,
}

/// Where a run of the file's tensor data goes: `len` bytes at `offset` in the data section
/// are the contents of `buffer`.
pub struct UploadTarget {
    pub offset: u64,
    pub len: u64,
    pub buffer: wgpu::Buffer,
}

impl ModelWeights {
    /// Buffers for every weight the model uses, and where in the file each one's bytes are.
    /// Nothing is written yet: the bytes arrive later (`loader`), so no copy of the file is held.
    pub fn allocate(gpu: &Gpu, f: &GgufHeader, cfg: &Config) -> Result<(Self, Vec<UploadTarget>), EngineError> {
        let targets = std::cell::RefCell::new(Vec::new());
        let info = |name: &str| f.tensor_info(name).ok_or_else(|| EngineError::from(ModelError::MissingTensor(name.into())));
        let matrix = |name: &str| -> Result<GpuWeight, EngineError> {
            let t = info(name)?;
            let (k, n) = (t.dims[0] as usize, t.dims[1] as usize);
            let w = GpuWeight::allocate(gpu, name, t.ty, k, n)?;
            let mut targets = targets.borrow_mut();
            for (buffer, range) in w.part_ranges() {
                targets.push(UploadTarget { offset: t.offset + range.start as u64, len: range.len() as u64, buffer: buffer.clone() });
            }
            Ok(w)
        };
        let vector = |name: &str| -> Result<wgpu::Buffer, EngineError> {
            let t = info(name)?;
            let buffer = gpu.storage(name, t.n_bytes);
            targets.borrow_mut().push(UploadTarget { offset: t.offset, len: t.n_bytes, buffer: buffer.clone() });
            Ok(buffer)
        };
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                Ok(LayerWeights {
                    attn_norm: vector(&n("attn_norm"))?,
                    wq: matrix(&n("attn_q"))?,
                    wk: matrix(&n("attn_k"))?,
                    wv: matrix(&n("attn_v"))?,
                    wo: matrix(&n("attn_output"))?,
                    ffn_norm: vector(&n("ffn_norm"))?,
                    w_gate: matrix(&n("ffn_gate"))?,
                    w_up: matrix(&n("ffn_up"))?,
                    w_down: matrix(&n("ffn_down"))?,
                })
            })
            .collect::<Result<_, EngineError>>()?;
        let weights = Self {
            token_embd: matrix("token_embd.weight")?,
            output_norm: vector("output_norm.weight")?,
            output: if cfg.tied_embeddings { None } else { Some(matrix("output.weight")?) },
            layers,
        };
        let mut targets = targets.into_inner();
        targets.sort_by_key(|t| t.offset);
        Ok((weights, targets))
    }

    pub fn lm_head(&self) -> &GpuWeight {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
