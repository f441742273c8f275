//! The model's weights in host memory, each tensor's bytes as the file stores them (block
//! formats dequantized inside the kernels), taken from the loader without another copy.

use super::matmul::CpuWeight;
use crate::gguf::GgufHeader;
use crate::model::{Config, ModelError};

pub struct CpuLayer {
    pub attn_norm: Vec<f32>, // (C)
    pub wq: CpuWeight,       // (H·D rows of C)
    pub wk: CpuWeight,       // (Hkv·D rows of C)
    pub wv: CpuWeight,       // (Hkv·D rows of C)
    /// q's, k's and v's biases one after another (qwen2): (H·D + 2·Hkv·D).
    pub qkv_bias: Option<Vec<f32>>,
    /// q's and k's per-head norm weights (qwen3, gemma3): (D) each.
    pub qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    /// Norm weights of attention's and the FFN's outputs (gemma3): (C) each.
    pub post_norms: Option<(Vec<f32>, Vec<f32>)>,
    pub wo: CpuWeight,       // (C rows of H·D)
    pub ffn_norm: Vec<f32>,  // (C)
    pub w_gate: CpuWeight,   // (F rows of C)
    pub w_up: CpuWeight,     // (F rows of C)
    pub w_down: CpuWeight,   // (C rows of F)
}

pub struct CpuModel {
    pub token_embd: CpuWeight, // (V rows of C)
    pub output_norm: Vec<f32>, // (C)
    /// The LM head: `output.weight`, or the token embedding when tied.
    pub output: Option<CpuWeight>, // (V rows of C)
    pub layers: Vec<CpuLayer>,
}

impl CpuModel {
    /// The model from its tensors' bytes: `take(name)` hands over a tensor's bytes (once).
    /// Shapes and types were checked against the config when the header was read.
    pub fn from_tensors(f: &GgufHeader, cfg: &Config, mut take: impl FnMut(&str) -> Option<Vec<u8>>) -> Result<Self, ModelError> {
        let take = &mut take;
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                let qkv_bias = if cfg.qkv_bias {
                    let parts = ["attn_q", "attn_k", "attn_v"].map(|s| format!("blk.{i}.{s}.bias"));
                    Some(parts.iter().map(|p| Ok(f32s(&bytes(take, p)?))).collect::<Result<Vec<_>, ModelError>>()?.concat())
                } else {
                    None
                };
                let qk_norm = if cfg.qk_norm { Some((f32s(&bytes(take, &n("attn_q_norm"))?), f32s(&bytes(take, &n("attn_k_norm"))?))) } else { None };
                let post_norms = if cfg.post_norms { Some((f32s(&bytes(take, &n("post_attention_norm"))?), f32s(&bytes(take, &n("post_ffw_norm"))?))) } else { None };
                Ok(CpuLayer {
                    qk_norm,
                    post_norms,
                    attn_norm: f32s(&bytes(take, &n("attn_norm"))?),
                    wq: matrix(f, take, &n("attn_q"))?,
                    wk: matrix(f, take, &n("attn_k"))?,
                    wv: matrix(f, take, &n("attn_v"))?,
                    qkv_bias,
                    wo: matrix(f, take, &n("attn_output"))?,
                    ffn_norm: f32s(&bytes(take, &n("ffn_norm"))?),
                    w_gate: matrix(f, take, &n("ffn_gate"))?,
                    w_up: matrix(f, take, &n("ffn_up"))?,
                    w_down: matrix(f, take, &n("ffn_down"))?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Self {
            token_embd: matrix(f, take, "token_embd.weight")?,
            output_norm: f32s(&bytes(take, "output_norm.weight")?),
            output: if cfg.tied_embeddings { None } else { Some(matrix(f, take, "output.weight")?) },
            layers,
        })
    }

    pub fn lm_head(&self) -> &CpuWeight {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// Little-endian f32 bytes as values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn bytes(take: &mut impl FnMut(&str) -> Option<Vec<u8>>, name: &str) -> Result<Vec<u8>, ModelError> {
    take(name).ok_or_else(|| ModelError::MissingTensor(name.into()))
}

fn matrix(f: &GgufHeader, take: &mut impl FnMut(&str) -> Option<Vec<u8>>, name: &str) -> Result<CpuWeight, ModelError> {
    let info = f.tensor_info(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let (k, n) = (info.dims[0] as usize, info.dims[1] as usize);
    CpuWeight::new(info.ty, k, n, bytes(take, name)?).ok_or_else(|| {
        ModelError::BadConfig(format!("tensor {name:?} ({n} rows of {k} {}) has a shape the CPU kernels cannot read: rows must be whole blocks of 32", info.ty.name()))
    })
}
