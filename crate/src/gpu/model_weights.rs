//! The model's weights on the GPU, uploaded in their GGUF block formats.

use crate::gguf::{GgufHeader, TensorInfo};
use super::context::Gpu;
use super::ops::reads_two_types;
use super::weights::{GpuWeight, HiRows};
use crate::model::{Config, ModelError};

use crate::engine::EngineError;

pub struct LayerWeights {
    pub attn_norm: wgpu::Buffer, // (C) f32
    pub attn_in: AttnIn,
    /// q's, k's and v's biases one after another (qwen2): (H·D + 2·Hkv·D) f32.
    pub qkv_bias: Option<wgpu::Buffer>,
    /// q's and k's per-head norm weights (qwen3, gemma3): (D) f32 each.
    pub qk_norm: Option<(wgpu::Buffer, wgpu::Buffer)>,
    /// Norm weights of attention's and the FFN's outputs (gemma3): (C) f32 each.
    pub post_norms: Option<(wgpu::Buffer, wgpu::Buffer)>,
    pub wo: GpuWeight,           // (C rows of H·D)
    pub ffn_norm: wgpu::Buffer,  // (C) f32
    pub ffn_in: FfnIn,
    pub w_down: GpuWeight, // (C rows of F)
}

/// Attention's q, k and v projections: one weight holding all three (one product) where they fit
/// one buffer and are of one type, or of two with the second from k's or v's first row on (as
/// `reads_two_types` allows: Q4_K_M's Q6_K v, say), else three.
pub enum AttnIn {
    /// (H·D + 2·Hkv·D rows of C): q's rows, then k's, then v's.
    Qkv(GpuWeight),
    Apart { wq: GpuWeight, wk: GpuWeight, wv: GpuWeight }, // (C, Hkv·D, Hkv·D rows of C)
}

/// The FFN's gate and up projections: one weight holding both (one product, act·mul its
/// epilogue) where their types match and both fit one buffer, else two.
pub enum FfnIn {
    /// (2F rows of C): the gate's rows, then up's.
    GateUp(GpuWeight),
    Apart { gate: GpuWeight, up: GpuWeight }, // (F rows of C) each
}

pub struct ModelWeights {
    pub token_embd: GpuWeight,    // (V rows of C)
    pub output_norm: wgpu::Buffer, // (C) f32
    /// The LM head: `output.weight`, or the token embedding when tied.
    pub output: Option<GpuWeight>, // (V rows of C)
    pub layers: Vec<LayerWeights>,
    /// Llama 3.x's RoPE frequency factors (D / 2), read on the CPU: they shape the frequency
    /// table (model/rope.rs). Filled by the loader once their bytes have arrived.
    pub rope_factors: Option<Vec<f32>>,
}

/// Where a run of the file's tensor data goes: `len` bytes at `offset` in the data section.
pub struct UploadTarget {
    pub offset: u64,
    pub len: u64,
    pub dest: Destination,
}

pub enum Destination {
    /// To `buffer` from byte `dst_offset` (a multiple of 4).
    Gpu { buffer: wgpu::Buffer, dst_offset: u64 },
    /// Kept in host memory under the tensor's name (the CPU backend's weights; on a GPU, the
    /// few small tensors read on the host).
    Host(String),
}

/// Uploads the tensors `infos` into `buffer` one after another, from its start.
fn stack(targets: &mut Vec<UploadTarget>, buffer: &wgpu::Buffer, infos: &[&TensorInfo]) {
    let mut dst_offset = 0;
    for t in infos {
        targets.push(UploadTarget { offset: t.offset, len: t.n_bytes, dest: Destination::Gpu { buffer: buffer.clone(), dst_offset } });
        dst_offset += t.n_bytes;
    }
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
                targets.push(UploadTarget { offset: t.offset + range.start as u64, len: range.len() as u64, dest: Destination::Gpu { buffer: buffer.clone(), dst_offset: 0 } });
            }
            Ok(w)
        };
        let vector = |name: &str| -> Result<wgpu::Buffer, EngineError> {
            let t = info(name)?;
            let buffer = gpu.storage(name, t.n_bytes);
            targets.borrow_mut().push(UploadTarget { offset: t.offset, len: t.n_bytes, dest: Destination::Gpu { buffer: buffer.clone(), dst_offset: 0 } });
            Ok(buffer)
        };
        // Tensors of one row length stacked in one buffer (one after another, each starting on
        // a word), where they fit a single part: the fused products' weights. Of one type, or
        // with `two_types` of two, the second from a tensor on, where the product can read them.
        let stacked = |name: String, names: &[&str], two_types: bool| -> Result<Option<GpuWeight>, EngineError> {
            let infos = names.iter().map(|n| info(n)).collect::<Result<Vec<_>, _>>()?;
            let first = &infos[0];
            if !infos.iter().all(|t| t.dims[0] == first.dims[0] && t.n_bytes % 4 == 0) {
                return Ok(None);
            }
            let k = first.dims[0] as usize;
            let rows = infos.iter().map(|t| t.dims[1] as usize).sum();
            let w = match infos.iter().position(|t| t.ty != first.ty) {
                None => Some(GpuWeight::allocate(gpu, &name, first.ty, k, rows)?).filter(|w| w.parts.len() == 1),
                Some(i) if two_types && infos[i..].iter().all(|t| t.ty == infos[i].ty) => {
                    let hi = HiRows { first_row: infos[..i].iter().map(|t| t.dims[1] as usize).sum(), ty: infos[i].ty };
                    match reads_two_types(first.ty, k, hi) {
                        true => GpuWeight::allocate_two_types(gpu, &name, first.ty, k, rows, hi)?,
                        false => None,
                    }
                }
                Some(_) => None,
            };
            let Some(w) = w else { return Ok(None) };
            stack(&mut targets.borrow_mut(), &w.parts[0].buffer, &infos);
            Ok(Some(w))
        };
        // Layer i's q, k and v biases in one buffer, in the order of the q/k/v product's rows.
        let biases = |i: usize| -> Result<wgpu::Buffer, EngineError> {
            let infos = ["attn_q", "attn_k", "attn_v"].map(|s| info(&format!("blk.{i}.{s}.bias")));
            let infos = infos.into_iter().collect::<Result<Vec<_>, _>>()?;
            let buffer = gpu.storage(&format!("blk.{i}.attn_qkv.bias"), infos.iter().map(|t| t.n_bytes).sum());
            stack(&mut targets.borrow_mut(), &buffer, &infos);
            Ok(buffer)
        };
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                let (q, k, v) = (n("attn_q"), n("attn_k"), n("attn_v"));
                let attn_in = match stacked(n("attn_qkv"), &[&q, &k, &v], true)? {
                    Some(w) => AttnIn::Qkv(w),
                    None => AttnIn::Apart { wq: matrix(&q)?, wk: matrix(&k)?, wv: matrix(&v)? },
                };
                let (gate, up) = (n("ffn_gate"), n("ffn_up"));
                let ffn_in = match stacked(n("ffn_gate_up"), &[&gate, &up], false)? {
                    Some(w) => FfnIn::GateUp(w),
                    None => FfnIn::Apart { gate: matrix(&gate)?, up: matrix(&up)? },
                };
                let qkv_bias = if cfg.qkv_bias { Some(biases(i)?) } else { None };
                let qk_norm = if cfg.qk_norm { Some((vector(&n("attn_q_norm"))?, vector(&n("attn_k_norm"))?)) } else { None };
                let post_norms = if cfg.post_norms { Some((vector(&n("post_attention_norm"))?, vector(&n("post_ffw_norm"))?)) } else { None };
                Ok(LayerWeights {
                    qk_norm,
                    post_norms,
                    attn_norm: vector(&n("attn_norm"))?,
                    attn_in,
                    qkv_bias,
                    wo: matrix(&n("attn_output"))?,
                    ffn_norm: vector(&n("ffn_norm"))?,
                    ffn_in,
                    w_down: matrix(&n("ffn_down"))?,
                })
            })
            .collect::<Result<_, EngineError>>()?;
        let weights = Self {
            token_embd: matrix("token_embd.weight")?,
            output_norm: vector("output_norm.weight")?,
            output: if cfg.tied_embeddings { None } else { Some(matrix("output.weight")?) },
            layers,
            rope_factors: None,
        };
        let mut targets = targets.into_inner();
        if cfg.rope_factors {
            let t = info(crate::model::rope::FACTORS_TENSOR)?;
            targets.push(UploadTarget { offset: t.offset, len: t.n_bytes, dest: Destination::Host(t.name.clone()) });
        }
        targets.sort_by_key(|t| t.offset);
        Ok((weights, targets))
    }

    pub fn lm_head(&self) -> &GpuWeight {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
