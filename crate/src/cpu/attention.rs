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
    // Blocks of equal size, so tasks take equal time (a step of 22: 11 and 11, not 16 and 6).
    let per_block = t.div_ceil(blocks.max(1));
    // Whole groups share each converted row; single heads spread a short step over the threads.
    let heads_per_task = if blocks * hkv >= 2 * threads.count() { group } else { 1 };
    let head_sets = h / heads_per_task;
    let out = Disjoint::new(out);
    // Task (block, head set) writes rows (token in block, head in set) of `out`: disjoint.
    threads.run(blocks * head_sets, |task| {
        let (block, set) = (task / head_sets, task % head_sets);
        let tokens = block * per_block..((block + 1) * per_block).min(t);
        let heads = set * heads_per_task..(set + 1) * heads_per_task;
        let kv_head = heads.start / group;
        let rows: Vec<(usize, usize)> = tokens.clone().flat_map(|ti| heads.clone().map(move |hi| (ti, hi))).collect();
        // Token ti sees keys first(ti)..n_keys(ti); the task's tokens together first(block
        // start)..n_keys(block end), `span` keys, score p of a row kept at p - lo.
        let n_keys = |ti: usize| start_pos + ti + 1;
        let first = |ti: usize| mask.first_key(start_pos + ti);
        let lo = first(tokens.start);
        let span = n_keys(tokens.end - 1) - lo;
        let mut scores = vec![0f32; rows.len() * span];
        let q_row = |r: usize| {
            let (ti, hi) = rows[r];
            &q[(ti * h + hi) * d..][..d]
        };
        // Two keys against four rows at a time: eight independent FMA chains hide their latency
        // and each loaded query chunk serves both keys. Scores of keys a row does not see are
        // computed too and never read.
        let mut keys = vec![0f32; 2 * d];
        let mut p = lo;
        while p < lo + span {
            let pair = (lo + span - p).min(2);
            for (k, key) in keys.chunks_exact_mut(d).take(pair).enumerate() {
                widen::<S>(&kv.k[layer][kv.slot(pages, p + k) + kv_head * d..][..d], key);
            }
            let (k0, k1) = keys.split_at(d);
            let k1 = if pair == 2 { k1 } else { k0 };
            let mut r = 0;
            while r + 4 <= rows.len() {
                let s = dot4x2::<S>([q_row(r), q_row(r + 1), q_row(r + 2), q_row(r + 3)], [k0, k1]);
                for (i, s) in s.into_iter().enumerate() {
                    for (j, s) in s.into_iter().enumerate().take(pair) {
                        scores[(r + i) * span + p + j - lo] = s * mask.scale;
                    }
                }
                r += 4;
            }
            for r in r..rows.len() {
                for (j, key) in [k0, k1].into_iter().enumerate().take(pair) {
                    scores[r * span + p + j - lo] = dot::<S>(q_row(r), key) * mask.scale;
                }
            }
            p += pair;
        }
        let mut sums = vec![0f32; rows.len()];
        for (r, &(ti, _)) in rows.iter().enumerate() {
            let s = &mut scores[r * span + first(ti) - lo..r * span + n_keys(ti) - lo];
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            s.iter_mut().for_each(|x| *x = exp(*x - max));
            sums[r] = s.iter().sum();
        }
        // The value rows widened once, then each output row summed over its keys with its
        // accumulator in registers (a row at a time, not a key at a time, which would load and
        // store every accumulator for every key).
        let mut values = vec![0f32; span * d];
        for (p, v) in (lo..lo + span).zip(values.chunks_exact_mut(d)) {
            widen::<S>(&kv.v[layer][kv.slot(pages, p) + kv_head * d..][..d], v);
        }
        let mut acc = vec![0f32; rows.len() * d];
        for (r, &(ti, _)) in rows.iter().enumerate() {
            let keys = first(ti) - lo..n_keys(ti) - lo;
            weighted_sum::<S>(&scores[r * span + keys.start..r * span + keys.end], &values[keys.start * d..keys.end * d], &mut acc[r * d..(r + 1) * d]);
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

/// e^x for x ≤ 0 (Cephes' expf: a degree-6 polynomial on x - n·ln 2, scaled by 2^n; within
/// 2 ulp of the exact value), branch-free so a loop of it is vectorised.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let x = x.max(-87.3);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_345e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.500_000_01;
    let e = (p * r * r + r) + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
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

/// `out = Σ_k w[k] · rows[k]` (rows of `out.len()` values), 64 columns at a time held in
/// eight registers across every row.
#[inline(always)]
fn weighted_sum<S: Simd>(w: &[f32], rows: &[f32], out: &mut [f32]) {
    let d = out.len();
    let whole = d / 64 * 64;
    for seg in (0..whole).step_by(64) {
        let mut acc = [[0f32; 8]; 8];
        for (k, &wk) in w.iter().enumerate() {
            let Ok(v): Result<&[f32; 64], _> = rows[k * d + seg..k * d + seg + 64].try_into() else { continue };
            for j in 0..8 {
                if let Ok(x) = v[j * 8..j * 8 + 8].try_into() {
                    S::axpy(&mut acc[j], wk, x);
                }
            }
        }
        for (o, a) in out[seg..seg + 64].chunks_exact_mut(8).zip(&acc) {
            o.copy_from_slice(a);
        }
    }
    out[whole..].fill(0.0);
    for (k, &wk) in w.iter().enumerate() {
        axpy::<S>(&mut out[whole..], wk, &rows[k * d + whole..(k + 1) * d]);
    }
}

/// The eight dot products of four rows `a` with two rows `b`, as eight independent chains.
#[inline(always)]
fn dot4x2<S: Simd>(a: [&[f32]; 4], b: [&[f32]; 2]) -> [[f32; 2]; 4] {
    let whole = b[0].len() / 8 * 8;
    let mut acc = [[S::zero(); 2]; 4];
    for i in (0..whole).step_by(8) {
        let (Ok(y0), Ok(y1)) = (b[0][i..i + 8].try_into(), b[1][i..i + 8].try_into()) else { continue };
        for (acc, a) in acc.iter_mut().zip(a) {
            if let Ok(x) = a[i..i + 8].try_into() {
                acc[0] = S::fmul_add(acc[0], x, y0);
                acc[1] = S::fmul_add(acc[1], x, y1);
            }
        }
    }
    let tail = |a: &[f32], b: &[f32]| a[whole..].iter().zip(&b[whole..]).map(|(x, y)| x * y).sum::<f32>();
    std::array::from_fn(|k| std::array::from_fn(|j| S::sum(acc[k][j]) + tail(a[k], b[j])))
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

#[cfg(test)]
mod tests {
    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let exact = (x as f64).exp();
            worst = worst.max(((super::exp(x) as f64 - exact) / exact).abs());
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert!(super::exp(f32::NEG_INFINITY) < 1e-37);
        assert_eq!(super::exp(0.0), 1.0);
    }
}
