//! The CPU backend: the forward pass over a batch of new tokens through a page table, with
//! the weights in host memory in their GGUF block formats, the KV pages in host memory, and
//! SIMD kernels (`simd`: AVX2 natively, simd128 in the browser) run on a pool of threads.
//!
//! Steps per layer, as the reference (model/reference.rs) and the GPU pass: RMSNorm → q, k, v
//! in one product → biases, q/k norms, RoPE, K/V into the pages → attention → x += o-product
//! (normalised first with post norms) → RMSNorm → gate and up in one product → act·mul →
//! x += down-product (the same). Activations are quantized once per product input
//! (`dot::quantize_q16`) for the quantized weights.

pub mod attention;
pub mod dot;
pub mod kv;
pub mod math;
pub mod matmul;
pub mod simd;
pub mod threads;
pub mod weights;

use attention::{attention, AttentionMask, AttentionShape, IntKv};
use dot::{quantize_q16, takes_q16, Q16Block};
use kv::KvPages;
use matmul::{matmul, CpuWeight, Input};
use simd::{Native, Simd};
use threads::Threads;
use weights::CpuModel;

use crate::engine::backend::{Head, HeadOut};
use crate::engine::sampling::top2;
use crate::kv::spill::QuantLayout;
use crate::model::Config;

/// Settings of the CPU backend.
#[derive(Debug, Clone, Default)]
pub struct CpuOptions {
    /// Threads for the kernels; `None` takes every core.
    pub threads: Option<usize>,
    /// How the threads beyond the caller's start.
    pub spawner: threads::Spawner,
}

#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error("{0}")]
    Threads(String),
    #[error("{0}")]
    OutOfMemory(String),
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenId { id: u32, vocab: usize },
    #[error("a forward batch outside the sizes the CPU backend was set up for")]
    Batch,
}

/// Buffers of one forward pass, sized for `max_batch` tokens once.
struct Scratch {
    x: Vec<f32>,   // (T, C) the residual stream
    h: Vec<f32>,   // (T, max(C, F)) a product's input: normed x, attention's output, SiLU·mul
    qkv: Vec<f32>, // (T, C + 2·Hkv·D)
    q: Vec<f32>,   // (T, C) rotated queries
    att: Vec<f32>, // (T, C)
    gu: Vec<f32>,  // (T, 2F) gate then up
    /// A product's output before its post norm (post norms only): (T, C).
    post: Vec<f32>,
    q16: Vec<Q16Block>,
    /// RoPE's cos and sin of each step position and pair, per table (global, then the local
    /// layers' where the model has them): (tables, T, D / 2).
    rope: Vec<(f32, f32)>,
}

pub struct CpuBackend {
    cfg: Config,
    model: CpuModel,
    pub kv: KvPages,
    /// Per layer: the integer keys and values prefill's attention reads, kept between steps.
    ints: Vec<IntKv>,
    threads: Threads,
    /// Each RoPE table's frequencies (global, then local), (D / 2) each: model/rope.rs.
    rope_freqs: Vec<Vec<f32>>,
    max_batch: usize,
    scratch: Scratch,
}

impl CpuBackend {
    /// The backend over loaded weights, with `n_pages` KV pages of `page_size` slots.
    pub fn new(cfg: &Config, model: CpuModel, rope_factors: Option<&[f32]>, page_size: usize, n_pages: usize, max_batch: usize, opts: &CpuOptions) -> Result<Self, CpuError> {
        let threads = Threads::new(opts.threads, &opts.spawner).map_err(CpuError::Threads)?;
        let kv = KvPages::new(cfg.n_layers, cfg.kv_dim(), page_size, n_pages).map_err(CpuError::OutOfMemory)?;
        let (t, c, f, qd) = (max_batch, cfg.n_embd, cfg.n_ff, cfg.q_dim());
        let qkv_cols = qd + 2 * cfg.kv_dim();
        let scratch = Scratch {
            x: vec![0.0; t * c],
            h: vec![0.0; t * c.max(f)],
            qkv: vec![0.0; t * qkv_cols],
            q: vec![0.0; t * qd],
            att: vec![0.0; t * qd],
            gu: vec![0.0; t * 2 * f],
            post: if cfg.post_norms { vec![0.0; t * c] } else { Vec::new() },
            q16: vec![Q16Block::default(); t * c.max(f).max(qd) / 32],
            rope: Vec::new(),
        };
        let rope_freqs: Vec<Vec<f32>> = std::iter::once(cfg.global_rope_freqs(rope_factors)).chain(cfg.local_rope_freqs()).collect();
        let scratch = Scratch { rope: vec![(0.0, 0.0); rope_freqs.len() * t * cfg.head_dim / 2], ..scratch };
        let ints = (0..cfg.n_layers).map(|_| IntKv::default()).collect();
        Ok(Self { cfg: cfg.clone(), model, kv, ints, threads, rope_freqs, max_batch, scratch })
    }

    pub fn threads(&self) -> usize {
        self.threads.count()
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Bytes of the weights as held (the file's tensor data the model reads).
    pub fn weight_bytes(&self) -> usize {
        let m = &self.model;
        let mats = m.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        mats.chain([&m.token_embd]).chain(&m.output).map(|w| w.data.len()).sum()
    }

    /// Runs `tokens` at positions `start_pos..`, writing their K/V into the pages of
    /// `page_table` (which must cover every position up to the last token), and ends as `head`
    /// asks. `stops`: the end-of-sequence ids a pick skips when asked to.
    pub fn forward(&mut self, tokens: &[u32], start_pos: usize, page_table: &[u32], head: Head<'_>, stops: &[u32]) -> Result<HeadOut, CpuError> {
        let t = tokens.len();
        if t == 0 || t > self.max_batch || (start_pos + t).div_ceil(self.kv.page_size) > page_table.len() || page_table.iter().any(|&p| p as usize >= self.kv.n_pages) {
            return Err(CpuError::Batch);
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= self.cfg.vocab_size) {
            return Err(CpuError::TokenId { id, vocab: self.cfg.vocab_size });
        }
        self.layers::<Native>(tokens, start_pos, page_table);
        if head == Head::None {
            return Ok(HeadOut::None);
        }
        let logits = self.logits::<Native>(t);
        Ok(match head {
            Head::Greedy(pick) => HeadOut::Picked(top2(&logits, |id| pick.admits(id, stops))),
            _ => HeadOut::Logits(logits),
        })
    }

    fn layers<S: Simd>(&mut self, tokens: &[u32], start_pos: usize, pages: &[u32]) {
        let cfg = &self.cfg;
        let (t, c, f, kvd, d, qd) = (tokens.len(), cfg.n_embd, cfg.n_ff, cfg.kv_dim(), cfg.head_dim, cfg.q_dim());
        let qkv_cols = qd + 2 * kvd;
        let s = &mut self.scratch;
        let th = &self.threads;
        // Embedding rows (scaled, for gemma3).
        let emb = &self.model.token_embd;
        for (row, &id) in s.x[..t * c].chunks_exact_mut(c).zip(tokens) {
            crate::gguf::blocks::dequantize(emb.ty, emb.row(id as usize), row);
            if cfg.embd_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= cfg.embd_scale);
            }
        }
        // RoPE's angles for this step's positions, per table, shared by the layers and heads.
        let per_table = t * d / 2;
        for (freqs, table) in self.rope_freqs.iter().zip(s.rope.chunks_exact_mut(per_table)) {
            for (ti, angles) in table.chunks_exact_mut(d / 2).enumerate() {
                let pos = (start_pos + ti) as f32;
                for (a, &freq) in angles.iter_mut().zip(freqs) {
                    let (sin, cos) = (pos * freq).sin_cos();
                    *a = (cos, sin);
                }
            }
        }
        let shape = AttentionShape { n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads, head_dim: d };
        for (l, w) in self.model.layers.iter().enumerate() {
            // q, k, v = rmsnorm(x) · [wq; wk; wv]ᵀ (+ biases), then q/k norms and RoPE.
            rmsnorm(&s.x[..t * c], &w.attn_norm, cfg.rms_eps, &mut s.h[..t * c]);
            let qkv = [&w.wq, &w.wk, &w.wv];
            product::<S>(th, &qkv, &s.h[..t * c], t, c, &mut s.q16, &mut s.qkv[..t * qkv_cols], qkv_cols, false);
            let table = &s.rope[if cfg.is_local(l) { per_table } else { 0 }..][..per_table];
            for (ti, row) in s.qkv[..t * qkv_cols].chunks_exact_mut(qkv_cols).enumerate() {
                if let Some(b) = &w.qkv_bias {
                    row.iter_mut().zip(b).for_each(|(x, b)| *x += b);
                }
                if let Some((nq, nk)) = &w.qk_norm {
                    let (q, k) = row[..qd + kvd].split_at_mut(qd);
                    rmsnorm_in_place(q, nq, cfg.rms_eps);
                    rmsnorm_in_place(k, nk, cfg.rms_eps);
                }
                let angles = &table[ti * d / 2..(ti + 1) * d / 2];
                for head in row[..qd + kvd].chunks_exact_mut(d) {
                    rope(head, angles, cfg.rope_neox);
                }
                s.q[ti * qd..(ti + 1) * qd].copy_from_slice(&row[..qd]);
                self.kv.write_token(l, pages, start_pos + ti, &row[qd..qd + kvd], &row[qd + kvd..]);
            }
            let mask = AttentionMask { window: cfg.window(l), scale: cfg.attn_scale };
            attention::<S>(th, &shape, mask, &self.kv, &mut self.ints[l], l, pages, start_pos, &s.q[..t * qd], &mut s.att[..t * qd]);
            // x += attention · woᵀ (normalised first with post norms).
            let post = w.post_norms.as_ref().map(|(attn, _)| attn);
            residual::<S>(th, &w.wo, &s.att[..t * qd], t, qd, &mut s.q16, &mut s.x[..t * c], &mut s.post, post, cfg.rms_eps);
            // x += (act(n · gateᵀ) * (n · upᵀ)) · downᵀ, n = rmsnorm(x).
            rmsnorm(&s.x[..t * c], &w.ffn_norm, cfg.rms_eps, &mut s.h[..t * c]);
            product::<S>(th, &[&w.w_gate, &w.w_up], &s.h[..t * c], t, c, &mut s.q16, &mut s.gu[..t * 2 * f], 2 * f, false);
            for (gu, out) in s.gu[..t * 2 * f].chunks_exact(2 * f).zip(s.h[..t * f].chunks_exact_mut(f)) {
                let (g, u) = gu.split_at(f);
                math::gated(cfg.ffn_act, g, u, out);
            }
            let post = w.post_norms.as_ref().map(|(_, ffn)| ffn);
            residual::<S>(th, &w.w_down, &s.h[..t * f], t, f, &mut s.q16, &mut s.x[..t * c], &mut s.post, post, cfg.rms_eps);
        }
    }

    /// The last token's logits: the final norm, then the LM head.
    fn logits<S: Simd>(&mut self, t: usize) -> Vec<f32> {
        let (c, v) = (self.cfg.n_embd, self.cfg.vocab_size);
        let s = &mut self.scratch;
        rmsnorm(&s.x[(t - 1) * c..t * c], &self.model.output_norm, self.cfg.rms_eps, &mut s.h[..c]);
        let mut logits = vec![0f32; v];
        product::<S>(&self.threads, &[self.model.lm_head()], &s.h[..c], 1, c, &mut s.q16, &mut logits, v, false);
        self.cfg.cap_logits(&mut logits);
        logits
    }

    /// The values of one page's slice `lk` (layer · 2 + K/V) as f32.
    pub fn page_values(&self, lk: usize, page: u32) -> Vec<f32> {
        self.kv.page_slice(lk, page).iter().map(|&h| half::f16::from_bits(h).to_f32()).collect()
    }

    /// Page `page` quantized as a spill record's payload: every slice, layer by layer, K then
    /// V (the CPU reference of kv_quant.wgsl, so records are the same on both backends).
    pub fn quantize_page(&self, layout: QuantLayout, page: u32) -> Vec<u32> {
        (0..self.kv.slices()).flat_map(|lk| layout.quantize(&self.page_values(lk, page))).collect()
    }

    /// Copies pages' keys and values: (source, destination) pairs.
    pub fn copy_pages(&mut self, pairs: &[(u32, u32)]) {
        for &(src, dst) in pairs {
            self.kv.copy_page(src, dst);
        }
    }

    /// Writes a record's payload back into page `page`, rounded to f16 as stored.
    pub fn restore_page(&mut self, layout: QuantLayout, page: u32, words: &[u32]) {
        let per_slice = layout.bytes_for(self.kv.page_size * self.kv.kv_dim) / 4;
        for (lk, words) in words.chunks_exact(per_slice).enumerate().take(self.kv.slices()) {
            for (o, v) in self.kv.page_slice_mut(lk, page).iter_mut().zip(layout.dequantize(words)) {
                *o = half::f16::from_f32(v).to_bits();
            }
        }
    }
}

/// `y (=|+=) x · [weights]ᵀ` for `t` tokens of `k` values, quantizing `x` first for the
/// quantized weights.
#[allow(clippy::too_many_arguments)]
fn product<S: Simd>(threads: &Threads, weights: &[&CpuWeight], x: &[f32], t: usize, k: usize, q16: &mut [Q16Block], y: &mut [f32], y_cols: usize, add: bool) {
    let blocks = if weights.iter().any(|w| takes_q16(w.ty)) { t * k / 32 } else { 0 };
    quantize_q16(&x[..blocks * 32], &mut q16[..blocks]);
    let input = Input { t, k, x, q16: &q16[..blocks] };
    matmul::<S>(threads, weights, &input, y, y_cols, 0, add);
}

/// `x += y`, y = input · wᵀ; with a post norm, y is RMS-normalised and scaled by it first
/// (made in `post`, (T, C)).
#[allow(clippy::too_many_arguments)]
fn residual<S: Simd>(th: &Threads, w: &CpuWeight, input: &[f32], t: usize, k: usize, q16: &mut [Q16Block], x: &mut [f32], post: &mut [f32], post_norm: Option<&Vec<f32>>, eps: f32) {
    let c = x.len() / t;
    match post_norm {
        None => product::<S>(th, &[w], input, t, k, q16, x, c, true),
        Some(norm) => {
            let y = &mut post[..t * c];
            product::<S>(th, &[w], input, t, k, q16, y, c, false);
            rmsnorm_in_place(y, norm, eps);
            x.iter_mut().zip(y.iter()).for_each(|(x, y)| *x += y);
        }
    }
}

/// RMS normalisation of each row of `x`, scaled by `w`, into `out`.
fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let c = w.len();
    for (o, row) in out.chunks_exact_mut(c).zip(x.chunks_exact(c)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / c as f32;
        let scale = 1.0 / (ms + eps).sqrt();
        for ((o, &x), &w) in o.iter_mut().zip(row).zip(w) {
            *o = x * scale * w;
        }
    }
}

/// RMS normalisation of each `w.len()`-long piece of `x` in place (q's and k's heads).
fn rmsnorm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    for head in x.chunks_exact_mut(w.len()) {
        let ms = head.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        let scale = 1.0 / (ms + eps).sqrt();
        head.iter_mut().zip(w).for_each(|(v, &w)| *v *= scale * w);
    }
}

/// Rotates one head's values by `angles` (cos, sin per pair): pairs (2i, 2i + 1), or (i,
/// i + D/2) in NEOX mode.
fn rope(head: &mut [f32], angles: &[(f32, f32)], neox: bool) {
    let half = head.len() / 2;
    for (i, &(cos, sin)) in angles.iter().enumerate().take(half) {
        let (ia, ib) = if neox { (i, i + half) } else { (2 * i, 2 * i + 1) };
        let (a, b) = (head[ia], head[ib]);
        head[ia] = a * cos - b * sin;
        head[ib] = a * sin + b * cos;
    }
}
