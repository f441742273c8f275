//! Causal grouped-query attention over the KV pages on the CPU, for a step of T new tokens at
//! positions `start_pos..start_pos + T`, within each query's sliding window where the layer has
//! one (keys before the window are never read).
//!
//! A task takes a block of the step's tokens and the query heads of one KV head (or one query
//! head, when there are too few tasks to keep the threads busy, as in decode). Each key and
//! value row is converted from f16 once per task and used by all the task's queries: the
//! scores of every (token, head) row, a softmax per row, then the value rows weighted into
//! the outputs. A prefill's task runs these as matrix products in register tiles (`tiled`);
//! decode's few rows go a row at a time (`by_rows`). A row's sums are all its task's, in key
//! order, so results do not depend on the thread count.

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
    if t * group < TILE_MIN_ROWS {
        return few_rows::<S>(threads, shape, mask, kv, layer, pages, start_pos, q, out);
    }
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
        let rows: Vec<(usize, usize)> = tokens.clone().flat_map(|ti| heads.clone().map(move |hi| (ti, hi))).collect();
        // The task's tokens together see keys first(block start)..n_keys(block end).
        let lo = mask.first_key(start_pos + tokens.start);
        let span = start_pos + tokens.end - lo;
        let task = Task { kv, layer, pages, kv_head: heads.start / group, h, d, mask, start_pos, rows, lo, span };
        let out_row = |r: usize| {
            let (ti, hi) = task.rows[r];
            // Row (ti, hi) is this task's alone.
            out.range((ti * h + hi) * d, d)
        };
        if task.rows.len() >= TILE_MIN_ROWS {
            tiled::<S>(&task, q, out_row);
        } else {
            by_rows::<S>(&task, q, |r, _, sum, acc| {
                let inv = 1.0 / sum;
                for (o, a) in out_row(r).iter_mut().zip(acc) {
                    *o = a * inv;
                }
            });
        }
    });
}

/// Rows from which a task's scores and weighted values go through register tiles: below it
/// (decode: one to a few heads of one token) most of a tile's rows would be padding.
const TILE_MIN_ROWS: usize = 8;

/// Keys per task in a step of few rows: the keys split at absolute multiples of it, so the
/// tasks are many whatever the step and results do not depend on the thread count.
const KEY_CHUNK: usize = 128;

/// A step whose every row fits in fewer than a tile's (decode): a task takes every query head
/// of one KV head (each key and value row widened once for all of them) over one chunk of the
/// keys, and gives each row's partial softmax (maximum, sum, weighted values); the partials
/// merge in key order.
#[allow(clippy::too_many_arguments)]
fn few_rows<S: Simd>(threads: &Threads, shape: &AttentionShape, mask: AttentionMask, kv: &KvPages, layer: usize, pages: &[u32], start_pos: usize, q: &[f32], out: &mut [f32]) {
    let (h, hkv, d) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
    let t = q.len() / (h * d);
    let group = h / hkv;
    let (lo, end) = (mask.first_key(start_pos), start_pos + t);
    let first_chunk = lo / KEY_CHUNK;
    let chunks = (end - 1) / KEY_CHUNK + 1 - first_chunk;
    let rows = t * group;
    // Per (KV head, chunk, row): maximum, sum, then the d weighted values.
    let stride = d + 2;
    let mut partials = vec![0f32; hkv * chunks * rows * stride];
    let parts = Disjoint::new(&mut partials);
    // Task (KV head, chunk) writes its own rows' partials: disjoint.
    threads.run(hkv * chunks, |i| {
        let (kv_head, c) = (i / chunks, i % chunks);
        let c_lo = ((first_chunk + c) * KEY_CHUNK).max(lo);
        let c_end = ((first_chunk + c + 1) * KEY_CHUNK).min(end);
        let heads = kv_head * group..(kv_head + 1) * group;
        let rows = (0..t).flat_map(|ti| heads.clone().map(move |hi| (ti, hi))).collect();
        let task = Task { kv, layer, pages, kv_head, h, d, mask, start_pos, rows, lo: c_lo, span: c_end - c_lo };
        by_rows::<S>(&task, q, |r, max, sum, acc| {
            let part = parts.range((i * t * group + r) * stride, stride);
            part[0] = max;
            part[1] = sum;
            part[2..].copy_from_slice(acc);
        });
    });
    for kv_head in 0..hkv {
        for r in 0..rows {
            let (ti, hi) = (r / group, kv_head * group + r % group);
            let part = |c: usize| &partials[((kv_head * chunks + c) * rows + r) * stride..][..stride];
            let max = (0..chunks).map(|c| part(c)[0]).fold(f32::NEG_INFINITY, f32::max);
            let o = &mut out[(ti * h + hi) * d..][..d];
            o.fill(0.0);
            let mut sum = 0.0;
            // A chunk the row sees no key of has sum 0 and adds nothing.
            for p in (0..chunks).map(part).filter(|p| p[1] > 0.0) {
                let w = exp(p[0] - max);
                sum += p[1] * w;
                for (o, a) in o.iter_mut().zip(&p[2..]) {
                    *o += a * w;
                }
            }
            let inv = 1.0 / sum;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// One task's share: `rows` (token, head) of one KV head, which together see keys
/// `lo..lo + span`.
struct Task<'a> {
    kv: &'a KvPages,
    layer: usize,
    pages: &'a [u32],
    kv_head: usize,
    h: usize,
    d: usize,
    mask: AttentionMask,
    start_pos: usize,
    rows: Vec<(usize, usize)>,
    lo: usize,
    span: usize,
}

impl Task<'_> {
    /// Keys row r sees among the task's: `first..n_keys` within `lo..lo + span` (empty when
    /// it sees none of them).
    fn keys(&self, r: usize) -> std::ops::Range<usize> {
        let pos = self.start_pos + self.rows[r].0;
        let start = self.mask.first_key(pos).max(self.lo);
        start..(pos + 1).min(self.lo + self.span).max(start)
    }
    fn q_row<'q>(&self, q: &'q [f32], r: usize) -> &'q [f32] {
        let (ti, hi) = self.rows[r];
        &q[(ti * self.h + hi) * self.d..][..self.d]
    }
    /// Key (`kv.k`) or value (`kv.v`) row at position p, as f16 bits.
    fn kv_row<'k>(&self, of: &'k [Vec<u16>], p: usize) -> &'k [u16] {
        &of[self.layer][self.kv.slot(self.pages, p) + self.kv_head * self.d..][..self.d]
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod tile {
    /// Keys and row vectors of a score tile; rows and value vectors of a weighted-sum tile:
    /// eight accumulators (of 16 AVX2 or 32 NEON registers).
    pub const QK: (usize, usize) = (4, 2);
    pub const PV: (usize, usize) = (4, 2);
}
#[cfg(target_arch = "wasm32")]
mod tile {
    /// Four accumulators: each is two 128-bit registers, and engines map wasm's onto x86's 16.
    pub const QK: (usize, usize) = (4, 1);
    pub const PV: (usize, usize) = (4, 1);
}

/// Lanes of the SIMD layer's accumulator (`Simd::F`): rows per score vector, dimensions per
/// value vector.
const LANES: usize = 8;

/// Keys per block: a block's widened rows, scores and weights stay in L1. Blocks end at
/// multiples of it (absolute positions), so a row's sums do not depend on which other rows
/// share its task: a step split differently (a warm request's suffix, a cold prompt) gives
/// each row the same bits.
const KEY_BLOCK: usize = 64;

/// The task as matrix products in register tiles, `LANES` rows to a vector, over blocks of
/// keys with a running maximum (online softmax): the queries are transposed once (scaled), so
/// a score tile is keys × row vectors with each key value broadcast and no horizontal sums;
/// a block's scores are kept keys × rows, so the max, exp and sum run across rows as vectors;
/// the weighted sum is rows × value vectors, rescaled when a row's maximum grows.
fn tiled<'o, S: Simd>(task: &Task, q: &[f32], out_row: impl Fn(usize) -> &'o mut [f32]) {
    let (d, lo, end) = (task.d, task.lo, task.lo + task.span);
    let n_rows = task.rows.len();
    let dp = d.div_ceil(LANES) * LANES;
    let rp = n_rows.div_ceil(LANES) * LANES;
    let (qk_keys, _) = tile::QK;

    // qt (dp, rp): the queries transposed and scaled; padding rows and dimensions are zero.
    let mut qt = vec![0f32; dp * rp];
    for r in 0..n_rows {
        for (dd, x) in task.q_row(q, r).iter().enumerate() {
            qt[dd * rp + r] = x * task.mask.scale;
        }
    }
    // Keys every row sees; scores of others are masked to -inf (exp gives 0).
    let seen_by_all = task.keys(n_rows - 1).start..task.keys(0).end;
    let mut max = vec![f32::NEG_INFINITY; rp];
    let mut sums = vec![0f32; rp];
    // acc (rp, dp): Σ weight · value row, scaled to the running maximum.
    let mut acc = vec![0f32; rp * dp];
    let mut scores = vec![0f32; KEY_BLOCK * rp];
    // A block's widened keys, then its values (padding rows and dimensions zero).
    let mut block = vec![0f32; KEY_BLOCK * dp];
    let mut rescale = vec![1f32; rp];
    let mut shift = vec![0f32; rp];
    let mut b0 = lo;
    while b0 < end {
        let n = (b0 / KEY_BLOCK * KEY_BLOCK + KEY_BLOCK).min(end) - b0;
        let n_tiled = n.div_ceil(qk_keys) * qk_keys;
        for (i, key) in block.chunks_exact_mut(dp).take(n_tiled).enumerate() {
            if i < n {
                widen::<S>(task.kv_row(&task.kv.k, b0 + i), &mut key[..d]);
            } else {
                key.fill(0.0);
            }
        }
        for k0 in (0..n_tiled).step_by(qk_keys) {
            score_tiles::<S>(&qt, rp, &block[k0 * dp..(k0 + qk_keys) * dp], dp, &mut scores[k0 * rp..(k0 + qk_keys) * rp]);
        }
        shift.copy_from_slice(&max);
        for (i, row) in scores.chunks_exact_mut(rp).take(n).enumerate() {
            let p = b0 + i;
            if !seen_by_all.contains(&p) {
                for (r, s) in row.iter_mut().enumerate().take(n_rows) {
                    if !task.keys(r).contains(&p) {
                        *s = f32::NEG_INFINITY;
                    }
                }
            }
            for (m, s) in shift.iter_mut().zip(row.iter()) {
                *m = m.max(*s);
            }
        }
        // `shift` holds each row's new maximum, and becomes what its scores are shifted by: a
        // row that has seen no key yet keeps maximum -inf and shift 0, so its weights stay 0.
        for ((m, shift), scale) in max.iter_mut().zip(shift.iter_mut()).zip(rescale.iter_mut()) {
            let new = *shift;
            *shift = if new == f32::NEG_INFINITY { 0.0 } else { new };
            *scale = exp(*m - *shift);
            *m = new;
        }
        for (r, (sum, &scale)) in sums.iter_mut().zip(&rescale).enumerate() {
            *sum *= scale;
            if scale != 1.0 {
                acc[r * dp..(r + 1) * dp].iter_mut().for_each(|a| *a *= scale);
            }
        }
        for row in scores.chunks_exact_mut(rp).take(n) {
            for ((s, shift), sum) in row.iter_mut().zip(&shift).zip(sums.iter_mut()) {
                *s = exp(*s - shift);
                *sum += *s;
            }
        }
        for (i, value) in block.chunks_exact_mut(dp).take(n).enumerate() {
            widen::<S>(task.kv_row(&task.kv.v, b0 + i), &mut value[..d]);
        }
        weight_tiles::<S>(&scores[..n * rp], rp, &block[..n * dp], dp, &mut acc);
        b0 += n;
    }
    for (r, sum) in sums.iter().enumerate().take(n_rows) {
        let inv = 1.0 / sum;
        for (o, a) in out_row(r).iter_mut().zip(&acc[r * dp..]) {
            *o = a * inv;
        }
    }
}

/// Scores of `keys.len() / dp` keys (rows of `keys`) against every row of `qt` (dp, rp),
/// into `out` (keys, rp).
#[inline(always)]
fn score_tiles<S: Simd>(qt: &[f32], rp: usize, keys: &[f32], dp: usize, out: &mut [f32]) {
    const M: usize = tile::QK.0;
    let mut v = 0;
    while v + tile::QK.1 <= rp / LANES {
        score_tile::<S, M, { tile::QK.1 }>(qt, rp, v, keys, dp, out);
        v += tile::QK.1;
    }
    while v < rp / LANES {
        score_tile::<S, M, 1>(qt, rp, v, keys, dp, out);
        v += 1;
    }
}

#[inline(always)]
fn score_tile<S: Simd, const M: usize, const N: usize>(qt: &[f32], rp: usize, v: usize, keys: &[f32], dp: usize, out: &mut [f32]) {
    let mut acc = [[S::zero(); N]; M];
    let keys: [&[f32]; M] = std::array::from_fn(|i| &keys[i * dp..(i + 1) * dp]);
    for (dd, qrow) in qt.chunks_exact(rp).enumerate().take(dp) {
        let qrow = &qrow[v * LANES..(v + N) * LANES];
        let qv: [S::F; N] = std::array::from_fn(|j| qrow[j * LANES..(j + 1) * LANES].try_into().map_or(S::zero(), S::loadf));
        for (acc, key) in acc.iter_mut().zip(keys) {
            let k = S::splat(key[dd]);
            for (a, qv) in acc.iter_mut().zip(qv) {
                *a = S::fmadd(*a, k, qv);
            }
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        for (j, a) in acc.iter().enumerate() {
            if let Ok(o) = (&mut out[i * rp + (v + j) * LANES..][..LANES]).try_into() {
                S::storef(*a, o);
            }
        }
    }
}

/// `acc` (rp, dp) += wᵀ · values for the weights `w` (keys, rp) of the value rows `values`
/// (keys, dp).
#[inline(always)]
fn weight_tiles<S: Simd>(w: &[f32], rp: usize, values: &[f32], dp: usize, acc: &mut [f32]) {
    const M: usize = tile::PV.0;
    for r in (0..rp).step_by(M) {
        let mut c = 0;
        while c + tile::PV.1 * LANES <= dp {
            weight_tile::<S, M, { tile::PV.1 }>(w, rp, r, values, dp, c, acc);
            c += tile::PV.1 * LANES;
        }
        while c < dp {
            weight_tile::<S, M, 1>(w, rp, r, values, dp, c, acc);
            c += LANES;
        }
    }
}

#[inline(always)]
fn weight_tile<S: Simd, const M: usize, const N: usize>(w: &[f32], rp: usize, r: usize, values: &[f32], dp: usize, c: usize, acc: &mut [f32]) {
    let at = |i: usize, j: usize| (r + i) * dp + c + j * LANES;
    let mut a: [[S::F; N]; M] = std::array::from_fn(|i| std::array::from_fn(|j| acc[at(i, j)..at(i, j) + LANES].try_into().map_or(S::zero(), S::loadf)));
    for (wk, value) in w.chunks_exact(rp).zip(values.chunks_exact(dp)) {
        let value = &value[c..c + N * LANES];
        let vv: [S::F; N] = std::array::from_fn(|j| value[j * LANES..(j + 1) * LANES].try_into().map_or(S::zero(), S::loadf));
        let wk = &wk[r..r + M];
        for (a, &wi) in a.iter_mut().zip(wk) {
            let wi = S::splat(wi);
            for (a, vv) in a.iter_mut().zip(vv) {
                *a = S::fmadd(*a, wi, vv);
            }
        }
    }
    for (i, a) in a.iter().enumerate() {
        for (j, a) in a.iter().enumerate() {
            if let Ok(o) = (&mut acc[at(i, j)..at(i, j) + LANES]).try_into() {
                S::storef(*a, o);
            }
        }
    }
}

/// The task a row at a time (few rows: decode): dot products of four rows against two keys,
/// a softmax per row, then the value rows weighted into each row's sums, given to `emit` as
/// (row, maximum score, sum of weights, weighted values not yet divided by the sum); a row
/// that sees none of the task's keys gives (-inf, 0, zeros).
fn by_rows<S: Simd>(task: &Task, q: &[f32], mut emit: impl FnMut(usize, f32, f32, &[f32])) {
    let (d, lo, span, rows) = (task.d, task.lo, task.span, task.rows.len());
    let mut scores = vec![0f32; rows * span];
    let q_row = |r: usize| task.q_row(q, r);
    // Two keys against four rows at a time: eight independent FMA chains hide their latency
    // and each loaded query chunk serves both keys. Scores of keys a row does not see are
    // computed too and never read.
    let mut keys = vec![0f32; 2 * d];
    let mut p = lo;
    while p < lo + span {
        let pair = (lo + span - p).min(2);
        for (k, key) in keys.chunks_exact_mut(d).take(pair).enumerate() {
            widen::<S>(task.kv_row(&task.kv.k, p + k), key);
        }
        let (k0, k1) = keys.split_at(d);
        let k1 = if pair == 2 { k1 } else { k0 };
        // A last group of fewer than four rows repeats its last row.
        for r in (0..rows).step_by(4) {
            let row = |i: usize| q_row((r + i).min(rows - 1));
            let s = dot4x2::<S>([row(0), row(1), row(2), row(3)], [k0, k1]);
            for (i, s) in s.into_iter().enumerate().take(rows - r) {
                for (j, s) in s.into_iter().enumerate().take(pair) {
                    scores[(r + i) * span + p + j - lo] = s * task.mask.scale;
                }
            }
        }
        p += pair;
    }
    let mut sums = vec![0f32; rows];
    let mut maxes = vec![f32::NEG_INFINITY; rows];
    for (r, (sum, max)) in sums.iter_mut().zip(maxes.iter_mut()).enumerate() {
        let keys = task.keys(r);
        let s = &mut scores[r * span + keys.start - lo..r * span + keys.end - lo];
        *max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        s.iter_mut().for_each(|x| *x = exp(*x - *max));
        *sum = s.iter().sum();
    }
    // The value rows widened once, then each output row summed over its keys with its
    // accumulator in registers (a row at a time, not a key at a time, which would load and
    // store every accumulator for every key).
    let mut values = vec![0f32; span * d];
    for (p, v) in (lo..lo + span).zip(values.chunks_exact_mut(d)) {
        widen::<S>(task.kv_row(&task.kv.v, p), v);
    }
    let mut acc = vec![0f32; d];
    for r in 0..rows {
        let keys = task.keys(r);
        weighted_sum::<S>(&scores[r * span + keys.start - lo..r * span + keys.end - lo], &values[(keys.start - lo) * d..(keys.end - lo) * d], &mut acc);
        emit(r, maxes[r], sums[r], &acc);
    }
}

/// e^x for x ≤ 0 (Cephes' expf: a degree-6 polynomial on x - n·ln 2, scaled by 2^n; within
/// 2 ulp of the exact value; 0 below -87.3, where f32 leaves its normal range, so masked
/// scores of -inf weigh nothing), branch-free so a loop of it is vectorised.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let below = x < -87.3;
    let x = x.max(-87.3);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_345e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.500_000_01;
    let e = (p * r * r + r) + 1.0;
    // 2^n from n's bits: n + 1.5·2^23 holds n in its low mantissa bits (|n| ≤ 126), which
    // shift into the exponent field; no float-to-int cast, whose saturation does not vectorise.
    let e = e * f32::from_bits(((n + 12_582_912.0).to_bits() << 23).wrapping_add(127 << 23));
    if below {
        0.0
    } else {
        e
    }
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
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(super::exp(0.0), 1.0);
    }
}
