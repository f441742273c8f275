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
    pub ffn_in: FfnIn,
    pub w_down: GpuWeight, // (C rows of F)
}

/// The FFN's gate and up projections: one weight holding both (one product, SiLU·mul its
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
}

/// Where a run of the file's tensor data goes: `len` bytes at `offset` in the data section
/// go to `buffer` from byte `dst_offset` (a multiple of 4).
pub struct UploadTarget {
    pub offset: u64,
    pub len: u64,
    pub buffer: wgpu::Buffer,
    pub dst_offset: u64,
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
                targets.push(UploadTarget { offset: t.offset + range.start as u64, len: range.len() as u64, buffer: buffer.clone(), dst_offset: 0 });
            }
            Ok(w)
        };
        let vector = |name: &str| -> Result<wgpu::Buffer, EngineError> {
            let t = info(name)?;
            let buffer = gpu.storage(name, t.n_bytes);
            targets.borrow_mut().push(UploadTarget { offset: t.offset, len: t.n_bytes, buffer: buffer.clone(), dst_offset: 0 });
            Ok(buffer)
        };
        // Gate and up in one buffer, up's rows after the gate's, where that can be.
        let ffn_in = |gate_name: &str, up_name: &str| -> Result<FfnIn, EngineError> {
            let (g, u) = (info(gate_name)?, info(up_name)?);
            let (k, f) = (g.dims[0] as usize, g.dims[1] as usize);
            let same = g.ty == u.ty && g.dims == u.dims && g.n_bytes == u.n_bytes;
            if same && g.n_bytes % 4 == 0 {
                let w = GpuWeight::allocate(gpu, &gate_name.replace("ffn_gate", "ffn_gate_up"), g.ty, k, 2 * f)?;
                if let [part] = w.parts.as_slice() {
                    let mut targets = targets.borrow_mut();
                    targets.push(UploadTarget { offset: g.offset, len: g.n_bytes, buffer: part.buffer.clone(), dst_offset: 0 });
                    targets.push(UploadTarget { offset: u.offset, len: u.n_bytes, buffer: part.buffer.clone(), dst_offset: g.n_bytes });
                    return Ok(FfnIn::GateUp(w));
                }
            }
            Ok(FfnIn::Apart { gate: matrix(gate_name)?, up: matrix(up_name)? })
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
                    ffn_in: ffn_in(&n("ffn_gate"), &n("ffn_up"))?,
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
