//! Synthetic llama, qwen2, qwen3 and gemma3 models with seeded random weights, written as GGUF: small
//! ones for fast tests, full-size shapes for benchmarks on machines the real weights cannot
//! travel to.

use crate::gguf::{GgmlType, GgufWriter, MetaValue};
use crate::tokenizer::byte_level::byte_to_char;

/// The architecture a synthetic file names, and the tensors that come with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntheticArch {
    Llama,
    /// Biases on q, k and v; NEOX RoPE.
    Qwen2,
    /// Per-head q and k norms; NEOX RoPE; no biases.
    Qwen3,
    /// Qwen3's attention, sliding-window layers of `window` positions (all but every sixth),
    /// post norms, GELU, scaled embeddings.
    Gemma3 { window: usize },
}

impl SyntheticArch {
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 { .. } => "gemma3",
        }
    }
}

/// Shape and storage of a synthetic model.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub arch: SyntheticArch,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// A head width stated in the file (`attention.key_length`, as Gemma 3's and Qwen3's), so
    /// the queries are `n_heads · head_dim` wide rather than n_embd; None: n_embd / n_heads.
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    pub n_ctx: usize,
    /// Type of the projection matrices; norms stay F32.
    pub weight_type: GgmlType,
    /// Type of the token embedding (and of the LM head when tied): Q8_0 like SmolLM2's.
    pub embedding_type: GgmlType,
    /// The FFN up projection's type when it differs from the other projections' (as in the
    /// mixed quantizations, Q4_K_M's among them).
    pub ffn_up_type: Option<GgmlType>,
    /// The same for attention's V projection (Q4_K_M's is Q6_K).
    pub attn_v_type: Option<GgmlType>,
    pub tied_embeddings: bool,
    pub rope_base: f32,
    /// Llama 3.x's RoPE frequency factors (`rope_freqs.weight`, from Llama 3.2's scaling).
    pub llama3_rope: bool,
    /// `tokenizer.chat_template` is written (a ChatML template); a base model has none.
    pub chat_template: bool,
    /// More metadata, written after the rest (keys the writer does not already write).
    pub extra_metadata: Vec<(String, MetaValue)>,
    pub seed: u64,
}

impl SyntheticSpec {
    /// A tiny model (a few MB) with odd head counts, GQA and tied embeddings.
    pub fn tiny() -> Self {
        Self {
            arch: SyntheticArch::Llama,
            n_layers: 2,
            n_embd: 192,
            n_ff: 320,
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: None,
            vocab_size: 512,
            n_ctx: 1024,
            weight_type: GgmlType::Q4_1,
            embedding_type: GgmlType::Q8_0,
            ffn_up_type: None,
            attn_v_type: None,
            tied_embeddings: true,
            rope_base: 10_000.0,
            llama3_rope: false,
            chat_template: true,
            extra_metadata: Vec::new(),
            seed: 7,
        }
    }

    /// The tiny model 256 wide (4 heads of 64 over 2 KV heads, FFN 512): every row a whole
    /// number of K-quant super-blocks.
    pub fn tiny_256() -> Self {
        Self { n_embd: 256, n_ff: 512, n_heads: 4, n_kv_heads: 2, ..Self::tiny() }
    }

    /// The shapes of SmolLM2-135M (30 layers, 576 wide, 9 heads over 3 KV heads).
    pub fn smollm2_135m_shape() -> Self {
        Self {
            arch: SyntheticArch::Llama,
            n_layers: 30,
            n_embd: 576,
            n_ff: 1536,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: None,
            vocab_size: 49152,
            n_ctx: 8192,
            weight_type: GgmlType::Q4_1,
            embedding_type: GgmlType::Q8_0,
            ffn_up_type: None,
            attn_v_type: None,
            tied_embeddings: true,
            rope_base: 100_000.0,
            llama3_rope: false,
            chat_template: true,
            extra_metadata: Vec::new(),
            seed: 1,
        }
    }

    /// The shapes of Llama-3.2-1B (16 layers, 2048 wide, 32 heads over 8 KV heads, a 128k
    /// vocabulary), tied embeddings, its RoPE (base 500000, Llama 3 scaling); about 0.8 GB in
    /// Q4_0.
    pub fn llama_3_2_1b_shape() -> Self {
        Self {
            arch: SyntheticArch::Llama,
            n_layers: 16,
            n_embd: 2048,
            n_ff: 8192,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: None,
            vocab_size: 128256,
            n_ctx: 131072,
            weight_type: GgmlType::Q4_0,
            embedding_type: GgmlType::Q8_0,
            ffn_up_type: None,
            attn_v_type: None,
            tied_embeddings: true,
            rope_base: 500_000.0,
            llama3_rope: true,
            chat_template: true,
            extra_metadata: Vec::new(),
            seed: 1,
        }
    }

    /// The shapes of Llama-3.2-3B (28 layers, 3072 wide, 24 heads over 8 KV heads of 128), tied
    /// embeddings, Llama 3's RoPE; Q4_0 with a Q8_0 embedding, about 2 GB.
    pub fn llama_3_2_3b_shape() -> Self {
        Self { n_layers: 28, n_embd: 3072, n_heads: 24, n_kv_heads: 8, ..Self::llama_3_2_1b_shape() }
    }

    /// The shapes of Qwen2.5-0.5B (24 layers, 896 wide, 14 heads over 2 KV heads, a 152k
    /// vocabulary, biases on q/k/v, NEOX RoPE with base 1e6), tied embeddings, in Q5_0 with a
    /// Q8_0 embedding: the types llama.cpp's Q4_K_M falls back to for rows of 896 (not a whole
    /// number of K-quant super-blocks); about 0.4 GB.
    pub fn qwen2_5_0_5b_shape() -> Self {
        Self {
            arch: SyntheticArch::Qwen2,
            n_layers: 24,
            n_embd: 896,
            n_ff: 4864,
            n_heads: 14,
            n_kv_heads: 2,
            head_dim: None,
            vocab_size: 151936,
            n_ctx: 32768,
            weight_type: GgmlType::Q5_0,
            embedding_type: GgmlType::Q8_0,
            ffn_up_type: None,
            attn_v_type: None,
            tied_embeddings: true,
            rope_base: 1_000_000.0,
            llama3_rope: false,
            chat_template: true,
            extra_metadata: Vec::new(),
            seed: 1,
        }
    }

    /// The Q4_K_M mix of llama.cpp's quantizer: K-quant projections, Q6_K where it spends more
    /// bits (attention's V, the embedding and LM head).
    pub fn q4_k_m(self) -> Self {
        Self { weight_type: GgmlType::Q4_K, attn_v_type: Some(GgmlType::Q6_K), embedding_type: GgmlType::Q6_K, ..self }
    }

    /// Why this spec cannot be written: a tensor whose row length is not a whole number of its
    /// type's blocks (K-quants need multiples of 256).
    pub fn check_shapes(&self) -> Result<(), String> {
        let f = self.n_ff;
        let c = self.n_embd;
        let rows = [
            ("embedding", self.embedding_type, c),
            ("projection", self.weight_type, c),
            ("attention output", self.weight_type, self.q_dim()),
            ("FFN down projection", self.weight_type, f),
            ("attention V", self.attn_v_type.unwrap_or(self.weight_type), c),
            ("FFN up projection", self.ffn_up_type.unwrap_or(self.weight_type), c),
        ];
        for (what, ty, k) in rows {
            if ty.row_bytes(k).is_none() {
                return Err(format!("the {what} rows of {k} weights are not a whole number of {} blocks ({} weights)", ty.name(), ty.block_len()));
            }
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.n_embd / self.n_heads)
    }

    /// The queries' width (and attention output's).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim()
    }

    pub fn to_gguf(&self) -> Vec<u8> {
        let mut rng = SplitMix64(self.seed);
        let mut w = GgufWriter::new();
        let u32m = |v: usize| MetaValue::U32(v as u32);
        let arch = self.arch.name();
        let key = |k: &str| format!("{arch}.{k}");
        w.meta("general.architecture", MetaValue::String(arch.into()))
            .meta("general.name", MetaValue::String(format!("synthetic-{arch}-seed{}", self.seed)))
            .meta(&key("block_count"), u32m(self.n_layers))
            .meta(&key("context_length"), u32m(self.n_ctx))
            .meta(&key("embedding_length"), u32m(self.n_embd))
            .meta(&key("feed_forward_length"), u32m(self.n_ff))
            .meta(&key("attention.head_count"), u32m(self.n_heads))
            .meta(&key("attention.head_count_kv"), u32m(self.n_kv_heads))
            .meta(&key("rope.freq_base"), MetaValue::F32(self.rope_base))
            .meta(&key("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-5))
            .meta(&key("vocab_size"), u32m(self.vocab_size));
        if let Some(d) = self.head_dim {
            w.meta(&key("attention.key_length"), u32m(d)).meta(&key("attention.value_length"), u32m(d));
        }
        if let SyntheticArch::Gemma3 { window } = self.arch {
            w.meta(&key("attention.sliding_window"), u32m(window));
        }
        self.write_tokenizer(&mut w);
        for (key, value) in &self.extra_metadata {
            w.meta(key, value.clone());
        }
        let (c, f, v) = (self.n_embd as u64, self.n_ff as u64, self.vocab_size as u64);
        let (d, q) = (self.head_dim() as u64, self.q_dim() as u64);
        let kv = self.n_kv_heads as u64 * d;
        // Scales chosen so activations stay O(1) through the layers.
        let mat = |w: &mut GgufWriter, rng: &mut SplitMix64, name: &str, cols: u64, rows: u64, ty: GgmlType, std: f32| {
            let vals: Vec<f32> = (0..cols * rows).map(|_| rng.normal() * std).collect();
            w.tensor(name, &[cols, rows], ty, &vals);
        };
        mat(&mut w, &mut rng, "token_embd.weight", c, v, self.embedding_type, 1.0);
        let norm = |w: &mut GgufWriter, name: &str, rng: &mut SplitMix64| {
            let vals: Vec<f32> = (0..c).map(|_| 1.0 + 0.1 * rng.normal()).collect();
            w.tensor(name, &[c], GgmlType::F32, &vals);
        };
        let s_c = 1.0 / (c as f32).sqrt();
        let s_f = 1.0 / (f as f32).sqrt();
        for i in 0..self.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            norm(&mut w, &n("attn_norm"), &mut rng);
            let ty = self.weight_type;
            mat(&mut w, &mut rng, &n("attn_q"), c, q, ty, s_c);
            mat(&mut w, &mut rng, &n("attn_k"), c, kv, ty, s_c);
            mat(&mut w, &mut rng, &n("attn_v"), c, kv, self.attn_v_type.unwrap_or(ty), s_c);
            mat(&mut w, &mut rng, &n("attn_output"), q, c, ty, 1.0 / (q as f32).sqrt());
            norm(&mut w, &n("ffn_norm"), &mut rng);
            mat(&mut w, &mut rng, &n("ffn_gate"), c, f, ty, s_c);
            mat(&mut w, &mut rng, &n("ffn_up"), c, f, self.ffn_up_type.unwrap_or(ty), s_c);
            mat(&mut w, &mut rng, &n("ffn_down"), f, c, ty, s_f);
            if matches!(self.arch, SyntheticArch::Qwen3 | SyntheticArch::Gemma3 { .. }) {
                // Per-head norms of q and k, near one as trained ones are.
                for name in ["attn_q_norm", "attn_k_norm"] {
                    let vals: Vec<f32> = (0..d).map(|_| 1.0 + 0.2 * rng.normal()).collect();
                    w.tensor(&n(name), &[d], GgmlType::F32, &vals);
                }
            }
            if matches!(self.arch, SyntheticArch::Gemma3 { .. }) {
                norm(&mut w, &n("post_attention_norm"), &mut rng);
                norm(&mut w, &n("post_ffw_norm"), &mut rng);
            }
            if self.arch == SyntheticArch::Qwen2 {
                // Qwen's biases are large next to the products (its k bias most of all).
                for (name, rows) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
                    let vals: Vec<f32> = (0..rows).map(|_| rng.normal() * 0.5).collect();
                    w.tensor(&format!("blk.{i}.{name}.bias"), &[rows], GgmlType::F32, &vals);
                }
            }
        }
        norm(&mut w, "output_norm.weight", &mut rng);
        if self.llama3_rope {
            w.tensor(crate::model::rope::FACTORS_TENSOR, &[d / 2], GgmlType::F32, &llama3_rope_factors(d as usize, self.rope_base));
        }
        if !self.tied_embeddings {
            mat(&mut w, &mut rng, "output.weight", c, v, self.weight_type, s_c);
        }
        w.to_bytes()
    }
}

/// Llama 3.x's RoPE frequency factors as its converter computes them (convert_hf_to_gguf.py),
/// with Llama 3.2's scaling: factor 32, low- and high-frequency factors 1 and 4 over an original
/// context of 8192. Pairs turning faster than the high-frequency wavelength keep theirs; slower
/// than the low one, divided by 32; in between, a smooth mix.
pub fn llama3_rope_factors(head_dim: usize, base: f32) -> Vec<f32> {
    let (factor, low, high, old_ctx) = (32.0f64, 1.0f64, 4.0f64, 8192.0f64);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / (base as f64).powf(2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < old_ctx / high {
                1.0
            } else if wavelen > old_ctx / low {
                factor as f32
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
            }
        })
        .collect()
}

impl SyntheticSpec {
    /// A byte-level BPE vocabulary: the 256 byte tokens, ChatML's special tokens and control
    /// fillers up to `vocab_size`, no merges (every byte is its own token), and ChatML's
    /// template, so synthetic models tokenize and chat like real ones.
    fn write_tokenizer(&self, w: &mut GgufWriter) {
        const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
        assert!(self.vocab_size >= 256 + SPECIALS.len(), "synthetic vocab must hold the byte tokens");
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        tokens.extend(SPECIALS.iter().map(|s| s.to_string()));
        tokens.extend((tokens.len()..self.vocab_size).map(|i| format!("<|extra_{i}|>")));
        let types = (0..self.vocab_size).map(|i| MetaValue::I32(if i < 256 { 1 } else { 3 })).collect();
        let s = |v: &str| MetaValue::String(v.into());
        w.meta("tokenizer.ggml.model", s("gpt2"))
            .meta("tokenizer.ggml.pre", s("default"))
            .meta("tokenizer.ggml.tokens", MetaValue::Array(tokens.into_iter().map(MetaValue::String).collect()))
            .meta("tokenizer.ggml.token_type", MetaValue::Array(types))
            .meta_empty_array("tokenizer.ggml.merges", &MetaValue::String(String::new()))
            .meta("tokenizer.ggml.bos_token_id", MetaValue::U32(257))
            .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(258))
            .meta("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
        if self.chat_template {
            w.meta(
                "tokenizer.chat_template",
                s("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
            );
        }
    }
}

/// A small seeded generator (SplitMix64): deterministic across platforms, no dependencies.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-7);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }
}
