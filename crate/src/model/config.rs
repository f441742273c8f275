//! Model configuration from GGUF metadata, and the tensor names of a llama-shaped model: llama
//! itself (Llama 2/3.x, SmolLM2, ...), qwen2 (Qwen2/2.5: biases on q, k and v, NEOX RoPE),
//! qwen3 (per-head RMSNorm of q and k before NEOX RoPE, a stated head width, no biases) and
//! gemma3 (qwen3's attention plus interleaved sliding-window layers with their own RoPE base,
//! GELU-gated FFN, norms after attention and the FFN too, embeddings scaled by sqrt(n_embd)).

use crate::gguf::{GgmlType, GgufError, GgufHeader};

/// Architectures whose tensor layout and forward pass radixlm implements.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3", "gemma3"];

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

/// gemma3's layer pattern and local RoPE base, which its GGUF files do not state (llama.cpp's
/// `LLM_ARCH_GEMMA3` hyper-parameters).
const GEMMA3_SWA_PATTERN: usize = 6;
const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;

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
    /// Embedding rows are multiplied by this (gemma3: sqrt(n_embd)), else 1.
    pub embd_scale: f32,
    /// The FFN's gate activation.
    pub ffn_act: FfnAct,
    /// Attention's and the FFN's outputs are RMS-normalised (`post_attention_norm`,
    /// `post_ffw_norm`) before their residual adds: gemma3.
    pub post_norms: bool,
    /// Sliding-window layers: how many positions a query of such a layer sees (itself and the
    /// window - 1 before it), and which layers they are.
    pub sliding_window: Option<SlidingWindow>,
    /// Attention scores are q·k times this: 1/sqrt(head_dim), gemma3 27B's 1/sqrt(n_embd/n_heads).
    pub attn_scale: f32,
    /// Final logits are `cap · tanh(logits / cap)` (`final_logit_softcapping`).
    pub logit_softcap: Option<f32>,
}

/// The FFN's gated activation: `act(x·gateᵀ) ⊙ (x·upᵀ)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnAct {
    /// SwiGLU: x · sigmoid(x).
    Silu,
    /// GeGLU with GELU's tanh approximation (gemma).
    GeluTanh,
}

impl FfnAct {
    pub fn apply(self, g: f32) -> f32 {
        match self {
            Self::Silu => g / (1.0 + (-g).exp()),
            // 0.5·g·(1 + tanh(sqrt(2/π)·(g + 0.044715·g³))), as ggml's and PyTorch's "tanh" GELU.
            Self::GeluTanh => 0.5 * g * (1.0 + (0.797_884_6 * g * (1.0 + 0.044_715 * g * g)).tanh()),
        }
    }
}

/// Interleaved sliding-window attention (gemma3): layer l is local unless
/// `l % pattern == pattern - 1` (llama.cpp's `set_swa_pattern`); a local layer's query at
/// position p sees keys p - window + 1 ..= p, turned by RoPE of base `rope_base` and no scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingWindow {
    pub window: usize,
    pub pattern: usize,
    pub rope_base: f32,
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
        // Sliding windows are read where their layer pattern is known (gemma3's); elsewhere a
        // window would be computed as full attention, so such models are refused, not run wrong.
        let sliding_window = match (arch, f.get(&format!("{arch}.attention.sliding_window"))) {
            ("gemma3", _) => {
                let window = u("attention.sliding_window")?;
                if window == 0 {
                    return Err(ModelError::BadConfig("a sliding window of 0 positions".into()));
                }
                Some(SlidingWindow { window, pattern: GEMMA3_SWA_PATTERN, rope_base: GEMMA3_LOCAL_ROPE_BASE })
            }
            (_, Some(w)) => return Err(ModelError::BadConfig(format!("sliding-window attention ({arch}.attention.sliding_window = {w:?}) is not supported"))),
            (_, None) => None,
        };
        let gemma3 = arch == "gemma3";
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
        let n_layers = u("block_count")?;
        let cfg = Config {
            arch: arch.into(),
            qkv_bias: arch == "qwen2",
            rope_neox: arch == "qwen2" || arch == "qwen3" || gemma3,
            qk_norm: arch == "qwen3" || gemma3,
            n_layers,
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
            embd_scale: if gemma3 { (n_embd as f32).sqrt() } else { 1.0 },
            ffn_act: if gemma3 { FfnAct::GeluTanh } else { FfnAct::Silu },
            post_norms: gemma3,
            sliding_window,
            // gemma_pytorch's query_pre_attn_scalar: n_embd / n_heads for the 27B (62 layers).
            attn_scale: 1.0 / (if gemma3 && n_layers == 62 { n_embd / n_heads.max(1) } else { head_dim } as f32).sqrt(),
            logit_softcap: match f.get(&format!("{arch}.final_logit_softcapping")) {
                Some(_) => Some(f.require_f64(&format!("{arch}.final_logit_softcapping"))? as f32).filter(|&c| c > 0.0),
                None => None,
            },
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

    /// Layer `layer`'s sliding window, None for a layer that sees every position.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.sliding_window.filter(|s| layer % s.pattern != s.pattern - 1).map(|s| s.window)
    }

    /// RoPE frequencies of the layers that see every position (model/rope.rs).
    pub fn global_rope_freqs(&self, factors: Option<&[f32]>) -> Vec<f32> {
        super::rope::freqs(self.head_dim, self.rope_base, self.rope_freq_scale, factors)
    }

    /// RoPE frequencies of the sliding-window layers: their own base, unscaled.
    pub fn local_rope_freqs(&self) -> Option<Vec<f32>> {
        self.sliding_window.map(|s| super::rope::freqs(self.head_dim, s.rope_base, 1.0, None))
    }

    /// Whether layer `layer` is a sliding-window layer (its own window and RoPE frequencies).
    pub fn is_local(&self, layer: usize) -> bool {
        self.window(layer).is_some()
    }

    /// Layer `layer`'s RoPE frequencies.
    pub fn rope_freqs(&self, layer: usize, factors: Option<&[f32]>) -> Vec<f32> {
        match self.local_rope_freqs() {
            Some(local) if self.is_local(layer) => local,
            _ => self.global_rope_freqs(factors),
        }
    }

    /// The logits as the model defines them from the LM head's products: soft-capped where the
    /// model says so (monotonic, so a greedy pick needs none of it).
    pub fn cap_logits(&self, logits: &mut [f32]) {
        if self.logit_softcap.is_some() {
            logits.iter_mut().for_each(|l| *l = self.cap_logit(*l));
        }
    }

    /// One logit as `cap_logits` makes it.
    pub fn cap_logit(&self, logit: f32) -> f32 {
        self.logit_softcap.map_or(logit, |cap| cap * (logit / cap).tanh())
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
            if self.post_norms {
                t.extend([(n("post_attention_norm"), vec![c]), (n("post_ffw_norm"), vec![c])]);
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
    fn gemma3_layers_alternate_five_windows_and_one_global() {
        use crate::model::synthetic::SyntheticArch;
        let spec = SyntheticSpec { arch: SyntheticArch::Gemma3 { window: 512 }, n_layers: 13, head_dim: Some(64), rope_base: 1e6, ..SyntheticSpec::tiny() };
        let cfg = config_of(&spec).unwrap();
        let windows: Vec<_> = (0..13).map(|l| cfg.window(l)).collect();
        assert_eq!(windows.iter().filter(|w| w.is_none()).count(), 2);
        assert!(windows[5].is_none() && windows[11].is_none() && windows[0] == Some(512) && windows[12] == Some(512));
        assert_eq!((cfg.rope_freqs(0, None)[1], cfg.rope_freqs(5, None)[1]), (10_000f32.powf(-2.0 / 64.0), 1e6f32.powf(-2.0 / 64.0)));
        assert!(cfg.post_norms && cfg.qk_norm && cfg.rope_neox && cfg.ffn_act == FfnAct::GeluTanh && cfg.embd_scale == (192f32).sqrt());
        assert_eq!(cfg.attn_scale, 0.125);
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
