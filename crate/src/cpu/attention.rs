//! Causal grouped-query attention over the KV pages on the CPU, for a step of T new tokens at
//! positions `start_pos..start_pos + T`, within each query's sliding window where the layer has
//! one (keys before the window are never read).
//!
//! A task takes a block of the step's tokens and the query heads of one KV head (or one query
//! head, when there are too few tasks to keep the threads busy, as in decode). Each key and
//! value row is converted from f16 once per task and used by all the task's queries: the
//! scores of every (token, head) row, a softmax per row, then the value rows weighted into
//! the outputs. A row's sums are all its task's, so results do not depend on the thread count.

use super::kv::KvPages;
use super::simd::Simd;
use super::threads::{Disjoint, Threads};

pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

pub use crate::model::reference::AttentionMask;

/// Tokens of a step one task takes.
const TOKEN_BLOCK: usize = 16;

/// `out` (T, H·D) = softmax(q·Kᵀ · scale) · V for each query head, over layer `layer`'s pages,
/// `q` (T, H·D) rotated; keys outside a query's window (`mask`) are never read.
#[allow(clippy::too_many_arguments)]
pub fn attention<S: Simd>(threads: &Threads, shape: &AttentionShape, mask: AttentionMask, kv: &KvPages, layer: usize, pages: &[u32], start_pos: usize, q: &[f32], out: &mut [f32]) {
    let (h, hkv, d) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
    let t = q.len() / (h * d);
    let group = h / hkv;
    let blocks = t.div_ceil(TOKEN_BLOCK);
    // Whole groups share each converted row; single heads spread a short step over the threads.
    let heads_per_task = if blocks * hkv >= 2 * threads.count() { group } else { 1 };
    let head_sets = h / heads_per_task;
    let out = Disjoint::new(out);
    // Task (block, head set) writes rows (token in block, head in set) of `out`: disjoint.
    threads.run(blocks * head_sets, |task| {
        let (block, set) = (task / head_sets, task % head_sets);
        let tokens = block * TOKEN_BLOCK..((block + 1) * TOKEN_BLOCK).min(t);
        let heads = set * heads_per_task..(set + 1) * heads_per_task;
        let kv_head = heads.start / group;
        let rows: Vec<(usize, usize)> = tokens.clone().flat_map(|ti| heads.clone().map(move |hi| (ti, hi))).collect();
        // Token ti sees keys first(ti)..n_keys(ti); the task's tokens together first(block
        // start)..n_keys(block end), `span` keys, score p of a row kept at p - lo.
        let n_keys = |ti: usize| start_pos + ti + 1;
        let first = |ti: usize| mask.first_key(start_pos + ti);
        let sees = |ti: usize, p: usize| p >= first(ti) && p < n_keys(ti);
        let lo = first(tokens.start);
        let span = n_keys(tokens.end - 1) - lo;
        let mut scores = vec![0f32; rows.len() * span];
        let mut row = vec![0f32; d];
        for p in lo..lo + span {
            widen::<S>(&kv.k[layer][kv.slot(pages, p) + kv_head * d..][..d], &mut row);
            for (r, &(ti, hi)) in rows.iter().enumerate() {
                if sees(ti, p) {
                    scores[r * span + p - lo] = dot::<S>(&q[(ti * h + hi) * d..][..d], &row) * mask.scale;
                }
            }
        }
        let mut sums = vec![0f32; rows.len()];
        for (r, &(ti, _)) in rows.iter().enumerate() {
            let s = &mut scores[r * span + first(ti) - lo..r * span + n_keys(ti) - lo];
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for x in s.iter_mut() {
                *x = (*x - max).exp();
                sums[r] += *x;
            }
        }
        let mut acc = vec![0f32; rows.len() * d];
        for p in lo..lo + span {
            widen::<S>(&kv.v[layer][kv.slot(pages, p) + kv_head * d..][..d], &mut row);
            for (r, &(ti, _)) in rows.iter().enumerate() {
                if sees(ti, p) {
                    axpy::<S>(&mut acc[r * d..(r + 1) * d], scores[r * span + p - lo], &row);
                }
            }
        }
        for (r, &(ti, hi)) in rows.iter().enumerate() {
            let o = out.range((ti * h + hi) * d, d);
            let inv = 1.0 / sums[r];
            for (o, a) in o.iter_mut().zip(&acc[r * d..(r + 1) * d]) {
                *o = a * inv;
            }
        }
    });
}

/// f16 bits to f32, eight at a time.
#[inline(always)]
fn widen<S: Simd>(src: &[u16], dst: &mut [f32]) {
    let whole = src.len() / 8 * 8;
    for (s, o) in src[..whole].chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
        if let (Ok(s), Ok(o)) = (s.try_into(), o.try_into()) {
            S::f16_to_f32(s, o);
        }
    }
    for (s, o) in src[whole..].iter().zip(&mut dst[whole..]) {
        *o = half::f16::from_bits(*s).to_f32();
    }
}

#[inline(always)]
pub fn dot<S: Simd>(a: &[f32], b: &[f32]) -> f32 {
    let whole = a.len() / 8 * 8;
    let mut acc = S::zero();
    for (x, y) in a[..whole].chunks_exact(8).zip(b.chunks_exact(8)) {
        if let (Ok(x), Ok(y)) = (x.try_into(), y.try_into()) {
            acc = S::fmul_add(acc, x, y);
        }
    }
    S::sum(acc) + a[whole..].iter().zip(&b[whole..]).map(|(x, y)| x * y).sum::<f32>()
}

#[inline(always)]
fn axpy<S: Simd>(y: &mut [f32], a: f32, x: &[f32]) {
    let whole = x.len() / 8 * 8;
    for (y, x) in y[..whole].chunks_exact_mut(8).zip(x.chunks_exact(8)) {
        if let (Ok(y), Ok(x)) = (y.try_into(), x.try_into()) {
            S::axpy(y, a, x);
        }
    }
    for (y, x) in y[whole..].iter_mut().zip(&x[whole..]) {
        *y += a * x;
    }
}
