//! Model configuration from GGUF metadata, and the tensor names of a llama-shaped model: llama
//! itself (Llama 2/3.x, SmolLM2, ...), qwen2 (Qwen2/2.5: biases on q, k and v, NEOX RoPE) and
//! qwen3 (per-head RMSNorm of q and k before NEOX RoPE, a stated head width, no biases).

use crate::gguf::{GgmlType, GgufError, GgufHeader};

/// Architectures whose tensor layout and forward pass radixlm implements.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3"];

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unsupported model architecture {0:?}: radixlm runs {SUPPORTED_ARCHITECTURES:?}")]
    UnsupportedArchitecture(String),
    #[error("model is missing tensor {0:?}")]
    MissingTensor(String),
    #[error("tensor {name:?} has shape {got:?}, expected {want:?}")]
    TensorShape { name: String, got: Vec<u64>, want: Vec<u64> },
    #[error("tensor {name:?} has type {ty}, which radixlm does not use for this role")]
    TensorType { name: String, ty: &'static str },
    #[error("invalid model configuration: {0}")]
    BadConfig(String),
}

/// Hyper-parameters of a llama-shaped model.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `general.architecture`: one of SUPPORTED_ARCHITECTURES.
    pub arch: String,
    /// q, k and v have biases (`attn_q.bias`, ...): qwen2.
    pub qkv_bias: bool,
    /// RoPE pairs each row i of a head with row i + D/2 (llama.cpp's NEOX mode: qwen2, qwen3)
    /// rather than with its neighbour (llama's converter permutes q and k for that).
    pub rope_neox: bool,
    /// Each head of q and of k is RMS-normalised and scaled by `attn_q_norm` / `attn_k_norm`
    /// (head_dim each) before RoPE: qwen3.
    pub qk_norm: bool,
    pub n_layers: usize,
    /// Model width (embedding length).
    pub n_embd: usize,
    /// Hidden width of the feed-forward block.
    pub n_ff: usize,
    pub n_heads: usize,
    /// Key/value heads; `n_heads / n_kv_heads` query heads share each (grouped-query attention).
    pub n_kv_heads: usize,
    /// Each head's width: `attention.key_length` where the file states it (Gemma 3, Qwen3:
    /// wider than n_embd / n_heads), else n_embd / n_heads.
    pub head_dim: usize,
    pub vocab_size: usize,
    /// Context length the model was trained for.
    pub n_ctx_train: usize,
    pub rope_base: f32,
    /// Linear RoPE scaling's 1 / factor (1 without scaling): model/rope.rs.
    pub rope_freq_scale: f32,
    /// Llama 3.x's per-pair RoPE frequency factors are in the file (`rope_freqs.weight`).
    pub rope_factors: bool,
    pub rms_eps: f32,
    /// True when `output.weight` is absent and the token embedding doubles as the LM head.
    pub tied_embeddings: bool,
}

impl Config {
    pub fn from_gguf(f: &GgufHeader) -> Result<Self, ModelError> {
        let arch = f.require_str("general.architecture")?;
        if !SUPPORTED_ARCHITECTURES.contains(&arch) {
            return Err(ModelError::UnsupportedArchitecture(arch.into()));
        }
        let u = |k: &str| f.require_u64(&format!("{arch}.{k}")).map(|v| v as usize);
        let n_embd = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        let n_kv_heads = match f.get(&format!("{arch}.attention.head_count_kv")) {
            Some(_) => u("attention.head_count_kv")?,
            None => n_heads,
        };
        let vocab_size = match f.get(&format!("{arch}.vocab_size")) {
            Some(_) => u("vocab_size")?,
            None => f
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .map(|a| a.len())
                .ok_or_else(|| ModelError::BadConfig("no vocab_size and no tokenizer.ggml.tokens".into()))?,
        };
        let rope_base = match f.get(&format!("{arch}.rope.freq_base")) {
            Some(_) => f.require_f64(&format!("{arch}.rope.freq_base"))? as f32,
            None => 10_000.0,
        };
        // Sliding-window attention forgets keys past the window: a prefix cache that keeps every
        // position would compute something else, so such models are refused, not run wrong.
        if let Some(w) = f.get(&format!("{arch}.attention.sliding_window")) {
            return Err(ModelError::BadConfig(format!("sliding-window attention ({arch}.attention.sliding_window = {w:?}) is not supported")));
        }
        let rope_freq_scale = match f.get(&format!("{arch}.rope.scaling.type")).and_then(|v| v.as_str()) {
            None | Some("none") => 1.0,
            Some("linear") => {
                let factor = f.require_f64(&format!("{arch}.rope.scaling.factor"))?;
                if !(factor.is_finite() && factor >= 1.0) {
                    return Err(ModelError::BadConfig(format!("linear RoPE scaling factor {factor} is not a finite number >= 1")));
                }
                (1.0 / factor) as f32
            }
            Some(s) => return Err(ModelError::BadConfig(format!("RoPE scaling {s:?} is not supported (none, linear and Llama 3's rope_freqs are)"))),
        };
        // A head's width is stated when it is not n_embd / n_heads; keys and values share it.
        let head_dim = match f.get(&format!("{arch}.attention.key_length")) {
            Some(_) => {
                let d = u("attention.key_length")?;
                if f.get(&format!("{arch}.attention.value_length")).is_some() && u("attention.value_length")? != d {
                    return Err(ModelError::BadConfig(format!("value heads of {} differ from key heads of {d}: radixlm needs them equal", u("attention.value_length")?)));
                }
                d
            }
            None if n_heads > 0 && n_embd % n_heads == 0 => n_embd / n_heads,
            None => return Err(ModelError::BadConfig(format!("embedding length {n_embd} is not divisible by {n_heads} heads and the file states no attention.key_length"))),
        };
        let cfg = Config {
            arch: arch.into(),
            qkv_bias: arch == "qwen2",
            rope_neox: arch == "qwen2" || arch == "qwen3",
            qk_norm: arch == "qwen3",
            n_layers: u("block_count")?,
            n_embd,
            n_ff: u("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size,
            n_ctx_train: u("context_length")?,
            rope_base,
            rope_freq_scale,
            rope_factors: f.tensor_info(super::rope::FACTORS_TENSOR).is_some(),
            rms_eps: f.require_f64(&format!("{arch}.attention.layer_norm_rms_epsilon"))? as f32,
            tied_embeddings: f.tensor_info("output.weight").is_none(),
        };
        cfg.validate()?;
        if let Some(rd) = f.get(&format!("{arch}.rope.dimension_count")).and_then(|v| v.as_u64()) {
            if rd as usize != cfg.head_dim {
                return Err(ModelError::BadConfig(format!(
                    "partial rotary embeddings (rope.dimension_count {rd} < head dim {}) are not supported",
                    cfg.head_dim
                )));
            }
        }
        cfg.check_tensors(f)?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::BadConfig(m));
        if self.n_layers == 0 || self.n_embd == 0 || self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return bad(format!("zero-sized dimension in {self:?}"));
        }
        if self.n_heads % self.n_kv_heads != 0 {
            return bad(format!("{} heads are not a multiple of {} KV heads", self.n_heads, self.n_kv_heads));
        }
        if self.n_heads.checked_mul(self.head_dim).is_none() || self.n_kv_heads.checked_mul(self.head_dim).is_none() {
            return bad(format!("{} heads of {} values overflow", self.n_heads, self.head_dim));
        }
        if self.head_dim % 2 != 0 {
            return bad(format!("head dimension {} must be even (RoPE turns pairs)", self.head_dim));
        }
        Ok(())
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Width of the queries and of attention's output: every head's (n_embd unless the file
    /// states a head width).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Every tensor a llama model needs, with its expected ggml shape (row length first).
    pub fn expected_tensors(&self) -> Vec<(String, Vec<u64>)> {
        let (c, f, kv, v) = (self.n_embd as u64, self.n_ff as u64, self.kv_dim() as u64, self.vocab_size as u64);
        let q = self.q_dim() as u64;
        let mut t = vec![("token_embd.weight".to_string(), vec![c, v]), ("output_norm.weight".into(), vec![c])];
        if !self.tied_embeddings {
            t.push(("output.weight".into(), vec![c, v]));
        }
        if self.rope_factors {
            t.push((super::rope::FACTORS_TENSOR.into(), vec![self.head_dim as u64 / 2]));
        }
        for i in 0..self.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            t.extend([
                (n("attn_norm"), vec![c]),
                (n("attn_q"), vec![c, q]),
                (n("attn_k"), vec![c, kv]),
                (n("attn_v"), vec![c, kv]),
                (n("attn_output"), vec![q, c]),
                (n("ffn_norm"), vec![c]),
                (n("ffn_gate"), vec![c, f]),
                (n("ffn_up"), vec![c, f]),
                (n("ffn_down"), vec![f, c]),
            ]);
            if self.qk_norm {
                t.extend([(n("attn_q_norm"), vec![self.head_dim as u64]), (n("attn_k_norm"), vec![self.head_dim as u64])]);
            }
            if self.qkv_bias {
                let b = |s: &str| format!("blk.{i}.{s}.bias");
                t.extend([(b("attn_q"), vec![q]), (b("attn_k"), vec![kv]), (b("attn_v"), vec![kv])]);
            }
        }
        t
    }

    fn check_tensors(&self, f: &GgufHeader) -> Result<(), ModelError> {
        // Each layer has several tensors: a forged block count must not size the list below.
        if self.n_layers > f.tensors.len() {
            return Err(ModelError::BadConfig(format!(
                "block_count {} exceeds the {} tensors in the file",
                self.n_layers,
                f.tensors.len()
            )));
        }
        for (name, want) in self.expected_tensors() {
            let info = f.tensor_info(&name).ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
            if info.dims != want {
                return Err(ModelError::TensorShape { name, got: info.dims.clone(), want });
            }
            // Norm weights, biases and RoPE's factors are read as f32.
            if want.len() == 1 && info.ty != GgmlType::F32 {
                return Err(ModelError::TensorType { name, ty: info.ty.name() });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufFile, MetaValue};
    use crate::model::synthetic::SyntheticSpec;

    fn config_of(spec: &SyntheticSpec) -> Result<Config, ModelError> {
        let bytes = spec.to_gguf();
        Config::from_gguf(&GgufFile::parse(&bytes).unwrap())
    }

    fn with_meta(key: &str, value: MetaValue) -> SyntheticSpec {
        SyntheticSpec { extra_metadata: vec![(key.into(), value)], ..SyntheticSpec::tiny() }
    }

    #[test]
    fn sliding_window_models_are_refused_by_name() {
        let err = config_of(&with_meta("llama.attention.sliding_window", MetaValue::U32(4096))).unwrap_err().to_string();
        assert!(err.contains("sliding-window attention") && err.contains("4096"), "{err}");
    }

    #[test]
    fn rope_scaling_linear_is_read_and_others_are_refused() {
        let linear = SyntheticSpec {
            extra_metadata: vec![("llama.rope.scaling.type".into(), MetaValue::String("linear".into())), ("llama.rope.scaling.factor".into(), MetaValue::F32(4.0))],
            ..SyntheticSpec::tiny()
        };
        assert_eq!(config_of(&linear).unwrap().rope_freq_scale, 0.25);
        let err = config_of(&with_meta("llama.rope.scaling.type", MetaValue::String("yarn".into()))).unwrap_err().to_string();
        assert!(err.contains("\"yarn\" is not supported"), "{err}");
    }

    #[test]
    fn a_stated_head_width_sets_the_query_width() {
        let cfg = config_of(&SyntheticSpec { head_dim: Some(64), ..SyntheticSpec::tiny() }).unwrap();
        assert_eq!((cfg.head_dim, cfg.q_dim(), cfg.kv_dim(), cfg.n_embd), (64, 384, 128, 192));
        let odd_values = with_meta("llama.attention.value_length", MetaValue::U32(48));
        let odd_values = SyntheticSpec { head_dim: None, extra_metadata: [odd_values.extra_metadata, vec![("llama.attention.key_length".into(), MetaValue::U32(32))]].concat(), ..SyntheticSpec::tiny() };
        let err = config_of(&odd_values).unwrap_err().to_string();
        assert!(err.contains("value heads of 48 differ from key heads of 32"), "{err}");
    }

    #[test]
    fn llama3_rope_factors_are_found_and_their_shape_checked() {
        let cfg = config_of(&SyntheticSpec { llama3_rope: true, ..SyntheticSpec::tiny() }).unwrap();
        assert!(cfg.rope_factors);
        assert!(!config_of(&SyntheticSpec::tiny()).unwrap().rope_factors);
    }
}
