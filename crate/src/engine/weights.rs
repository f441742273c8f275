//! The model's weights on the GPU, uploaded in their GGUF block formats.

use crate::gguf::GgufFile;
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

impl ModelWeights {
    pub fn upload(gpu: &Gpu, f: &GgufFile, cfg: &Config) -> Result<Self, EngineError> {
        let matrix = |name: &str| -> Result<GpuWeight, EngineError> {
            let t = f.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?;
            let (k, n) = (t.info.dims[0] as usize, t.info.dims[1] as usize);
            Ok(GpuWeight::upload(gpu, name, t.info.ty, k, n, t.data)?)
        };
        let vector = |name: &str| -> Result<wgpu::Buffer, EngineError> {
            let t = f.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?;
            Ok(gpu.upload(name, t.data))
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
        Ok(Self {
            token_embd: matrix("token_embd.weight")?,
            output_norm: vector("output_norm.weight")?,
            output: if cfg.tied_embeddings { None } else { Some(matrix("output.weight")?) },
            layers,
        })
    }

    pub fn lm_head(&self) -> &GpuWeight {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
