//! The CPU reference forward pass: plain f32 Rust, written to be read, the oracle for every
//! GPU kernel and for the GPU engine. It mirrors llama.cpp's llama graph step by step.

use super::config::{Config, FfnAct, ModelError};
use crate::gguf::GgufFile;

/// RMS normalisation of each row of `x` (T, C), scaled by `w` (C).
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let c = w.len();
    let mut out = vec![0f32; x.len()];
    for (o, row) in out.chunks_exact_mut(c).zip(x.chunks_exact(c)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / c as f32;
        let scale = 1.0 / (ms + eps).sqrt();
        for j in 0..c {
            o[j] = row[j] * scale * w[j];
        }
    }
    out
}

/// `y = x · wᵀ`: x (T, K), w (N, K) row-major as GGUF stores it, y (T, N).
pub fn matmul(x: &[f32], w: &[f32], k: usize, n: usize) -> Vec<f32> {
    let t = x.len() / k;
    let mut y = vec![0f32; t * n];
    for i in 0..t {
        let xi = &x[i * k..(i + 1) * k];
        for j in 0..n {
            let wj = &w[j * k..(j + 1) * k];
            y[i * n + j] = xi.iter().zip(wj).map(|(a, b)| a * b).sum();
        }
    }
    y
}

/// Rotary position embedding, in place, on x (T, H, D) for positions `start_pos + t`.
/// llama.cpp's "normal" mode for llama: adjacent pairs (x[2i], x[2i+1]) rotate by
/// `pos · freqs[i]` (model/rope.rs; the GGUF converter permutes Q and K weights to match).
pub fn rope(x: &mut [f32], n_heads: usize, head_dim: usize, start_pos: usize, freqs: &[f32]) {
    for (t, tok) in x.chunks_exact_mut(n_heads * head_dim).enumerate() {
        let pos = (start_pos + t) as f32;
        for head in tok.chunks_exact_mut(head_dim) {
            for (i, &freq) in freqs.iter().enumerate().take(head_dim / 2) {
                let (s, c) = (pos * freq).sin_cos();
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * c - b * s;
                head[2 * i + 1] = a * s + b * c;
            }
        }
    }
}

/// RoPE in llama.cpp's NEOX mode (qwen2): each head's rows i and i + D/2 rotate as a pair by
/// `pos · freqs[i]`.
pub fn rope_neox(x: &mut [f32], n_heads: usize, head_dim: usize, start_pos: usize, freqs: &[f32]) {
    let half = head_dim / 2;
    for (t, tok) in x.chunks_exact_mut(n_heads * head_dim).enumerate() {
        let pos = (start_pos + t) as f32;
        for head in tok.chunks_exact_mut(head_dim) {
            for (i, &freq) in freqs.iter().enumerate().take(half) {
                let (s, c) = (pos * freq).sin_cos();
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * c - b * s;
                head[i + half] = a * s + b * c;
            }
        }
    }
}

/// Which keys a query sees and how its scores scale.
#[derive(Debug, Clone, Copy)]
pub struct AttentionMask {
    /// Queries see at most this many positions, their own included (a sliding-window layer).
    pub window: Option<usize>,
    /// q·k is multiplied by this.
    pub scale: f32,
}

impl AttentionMask {
    /// Plain causal attention scaled by 1/sqrt(head_dim).
    pub fn causal(head_dim: usize) -> Self {
        Self { window: None, scale: 1.0 / (head_dim as f32).sqrt() }
    }

    /// The first position a query at `pos` sees.
    pub fn first_key(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// Causal grouped-query attention. q (T, H, D) holds queries at positions `start_pos + t`;
/// k and v (L, Hkv, D) hold every cached position 0..L with L >= start_pos + T. Query t attends
/// to positions `mask.first_key(start_pos + t)..=start_pos + t`. Returns (T, H, D).
#[allow(clippy::too_many_arguments)]
pub fn attention(q: &[f32], k: &[f32], v: &[f32], n_heads: usize, n_kv_heads: usize, head_dim: usize, start_pos: usize, mask: AttentionMask) -> Vec<f32> {
    let (h, hkv, d) = (n_heads, n_kv_heads, head_dim);
    let t_count = q.len() / (h * d);
    let group = h / hkv;
    let mut out = vec![0f32; q.len()];
    for t in 0..t_count {
        let keys = mask.first_key(start_pos + t)..start_pos + t + 1;
        for hi in 0..h {
            let kh = hi / group;
            let qv = &q[(t * h + hi) * d..][..d];
            let mut scores: Vec<f32> = keys
                .clone()
                .map(|p| qv.iter().zip(&k[(p * hkv + kh) * d..][..d]).map(|(a, b)| a * b).sum::<f32>() * mask.scale)
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for s in &mut scores {
                *s = (*s - max).exp();
                sum += *s;
            }
            let o = &mut out[(t * h + hi) * d..][..d];
            for (p, s) in keys.clone().zip(&scores) {
                let vv = &v[(p * hkv + kh) * d..][..d];
                for j in 0..d {
                    o[j] += s / sum * vv[j];
                }
            }
        }
    }
    out
}

/// x (T, N) += b (N) on every row.
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        row.iter_mut().zip(b).for_each(|(x, b)| *x += b);
    }
}

/// The gated FFN's activation: act(gate) * up, elementwise.
pub fn glu(act: FfnAct, gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter().zip(up).map(|(&g, u)| act.apply(g) * u).collect()
}

struct Layer {
    attn_norm: Vec<f32>, // (C)
    /// q, k and v's biases (qwen2): (H·D), (Hkv·D), (Hkv·D).
    bias: Option<[Vec<f32>; 3]>,
    /// q's and k's per-head norm weights (qwen3, gemma3): (D), (D).
    qk_norm: Option<[Vec<f32>; 2]>,
    /// Norm weights of attention's and the FFN's outputs (gemma3): (C), (C).
    post_norms: Option<[Vec<f32>; 2]>,
    wq: Vec<f32>,        // (H·D, C)
    wk: Vec<f32>,        // (Hkv·D, C)
    wv: Vec<f32>,        // (Hkv·D, C)
    wo: Vec<f32>,        // (C, H·D)
    ffn_norm: Vec<f32>,  // (C)
    w_gate: Vec<f32>,    // (F, C)
    w_up: Vec<f32>,      // (F, C)
    w_down: Vec<f32>,    // (C, F)
}

/// All weights dequantized to f32.
pub struct ReferenceModel {
    pub cfg: Config,
    /// Round cached keys and values to f16, as the engine's KV pages store them (on by default:
    /// the oracle checks the engine's arithmetic, not its storage format).
    pub kv_f16: bool,
    token_embd: Vec<f32>, // (V, C)
    output_norm: Vec<f32>, // (C)
    output: Option<Vec<f32>>, // (V, C); None when tied to token_embd
    layers: Vec<Layer>,
    rope_freqs: Vec<Vec<f32>>, // per layer (D / 2) model/rope.rs
}

/// The reference's KV cache: every position's rotated keys and values, per layer.
#[derive(Default, Clone)]
pub struct ReferenceCache {
    k: Vec<Vec<f32>>, // per layer (L, Hkv·D)
    v: Vec<Vec<f32>>, // per layer (L, Hkv·D)
}

impl ReferenceCache {
    pub fn len(&self, kv_dim: usize) -> usize {
        self.k.first().map_or(0, |k| k.len() / kv_dim)
    }
}

impl ReferenceModel {
    pub fn load(f: &GgufFile) -> Result<Self, ModelError> {
        let cfg = Config::from_gguf(f)?;
        let t = |name: &str| -> Result<Vec<f32>, ModelError> {
            Ok(f.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?.to_f32())
        };
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                let b = |s: &str| t(&format!("blk.{i}.{s}.bias"));
                Ok(Layer {
                    bias: if cfg.qkv_bias { Some([b("attn_q")?, b("attn_k")?, b("attn_v")?]) } else { None },
                    qk_norm: if cfg.qk_norm { Some([t(&n("attn_q_norm"))?, t(&n("attn_k_norm"))?]) } else { None },
                    post_norms: if cfg.post_norms { Some([t(&n("post_attention_norm"))?, t(&n("post_ffw_norm"))?]) } else { None },
                    attn_norm: t(&n("attn_norm"))?,
                    wq: t(&n("attn_q"))?,
                    wk: t(&n("attn_k"))?,
                    wv: t(&n("attn_v"))?,
                    wo: t(&n("attn_output"))?,
                    ffn_norm: t(&n("ffn_norm"))?,
                    w_gate: t(&n("ffn_gate"))?,
                    w_up: t(&n("ffn_up"))?,
                    w_down: t(&n("ffn_down"))?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        let factors = if cfg.rope_factors { Some(t(super::rope::FACTORS_TENSOR)?) } else { None };
        Ok(Self {
            rope_freqs: (0..cfg.n_layers).map(|l| cfg.rope_freqs(l, factors.as_deref())).collect(),
            kv_f16: true,
            token_embd: t("token_embd.weight")?,
            output_norm: t("output_norm.weight")?,
            output: if cfg.tied_embeddings { None } else { Some(t("output.weight")?) },
            layers,
            cfg,
        })
    }

    /// Runs `tokens` at positions `cache.len()..`, appending to `cache`, and returns the logits
    /// of every token (T, V).
    pub fn forward(&self, tokens: &[u32], cache: &mut ReferenceCache) -> Vec<f32> {
        let cfg = &self.cfg;
        let (c, d, kvd, qd) = (cfg.n_embd, cfg.head_dim, cfg.kv_dim(), cfg.q_dim());
        if cache.k.is_empty() {
            cache.k = vec![Vec::new(); cfg.n_layers];
            cache.v = vec![Vec::new(); cfg.n_layers];
        }
        let start_pos = cache.len(kvd);
        // Embedding lookup (scaled, for gemma3).
        let mut x: Vec<f32> = tokens.iter().flat_map(|&t| self.token_embd[t as usize * c..][..c].iter().map(|v| v * cfg.embd_scale)).collect();
        for (l, w) in self.layers.iter().enumerate() {
            // Attention block: x += Wo · attn(rope(Wq·n), rope(Wk·n), Wv·n), n = rmsnorm(x) (q
            // and k each normalised per head first with qk_norm; the sum normalised before the
            // add with post norms).
            let h = rmsnorm(&x, &w.attn_norm, cfg.rms_eps);
            let mut q = matmul(&h, &w.wq, c, qd);
            let mut k = matmul(&h, &w.wk, c, kvd);
            let mut v = matmul(&h, &w.wv, c, kvd);
            if let Some([bq, bk, bv]) = &w.bias {
                add_bias(&mut q, bq);
                add_bias(&mut k, bk);
                add_bias(&mut v, bv);
            }
            if let Some([nq, nk]) = &w.qk_norm {
                q = rmsnorm(&q, nq, cfg.rms_eps);
                k = rmsnorm(&k, nk, cfg.rms_eps);
            }
            let rope = if cfg.rope_neox { rope_neox } else { rope };
            rope(&mut q, cfg.n_heads, d, start_pos, &self.rope_freqs[l]);
            rope(&mut k, cfg.n_kv_heads, d, start_pos, &self.rope_freqs[l]);
            let stored = |x: Vec<f32>| -> Vec<f32> {
                if self.kv_f16 {
                    x.into_iter().map(|v| half::f16::from_f32(v).to_f32()).collect()
                } else {
                    x
                }
            };
            cache.k[l].extend(stored(k));
            cache.v[l].extend(stored(v));
            let mask = AttentionMask { window: cfg.window(l), scale: cfg.attn_scale };
            let a = attention(&q, &cache.k[l], &cache.v[l], cfg.n_heads, cfg.n_kv_heads, d, start_pos, mask);
            let mut o = matmul(&a, &w.wo, qd, c);
            if let Some([post_attn, _]) = &w.post_norms {
                o = rmsnorm(&o, post_attn, cfg.rms_eps);
            }
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            // Feed-forward block: x += Wdown · (act(Wgate·n) * Wup·n), n = rmsnorm(x).
            let h = rmsnorm(&x, &w.ffn_norm, cfg.rms_eps);
            let g = matmul(&h, &w.w_gate, c, cfg.n_ff);
            let u = matmul(&h, &w.w_up, c, cfg.n_ff);
            let mut f = matmul(&glu(cfg.ffn_act, &g, &u), &w.w_down, cfg.n_ff, c);
            if let Some([_, post_ffn]) = &w.post_norms {
                f = rmsnorm(&f, post_ffn, cfg.rms_eps);
            }
            x.iter_mut().zip(&f).for_each(|(x, f)| *x += f);
        }
        let h = rmsnorm(&x, &self.output_norm, cfg.rms_eps);
        let mut logits = matmul(&h, self.output.as_ref().unwrap_or(&self.token_embd), c, cfg.vocab_size);
        cfg.cap_logits(&mut logits);
        logits
    }
}
