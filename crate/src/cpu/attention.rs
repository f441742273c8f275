//! Causal grouped-query attention over the KV pages on the CPU, for a step of T new tokens at
//! positions `start_pos..start_pos + T`, within each query's sliding window where the layer has
//! one (keys before the window are never read).
//!
//! A task takes a block of the step's tokens and the query heads of one KV head, over one or
//! more parts of the keys: the scores of every (token, head) row, a softmax per row, then the
//! value rows weighted into the row's sums; the parts' softmaxes merge in key order. A
//! prefill's tasks run these as integer matrix products in register tiles (`tiled`), over keys
//! and values held as 16-bit integers with a scale per row (`IntKv`, kept between steps: a step
//! converts only positions whose pages changed);
//! decode's few rows go a row at a time in f32 (`by_rows`), each key and value row widened
//! from f16 once per task. Parts and blocks of keys sit at absolute positions, so results do
//! not depend on the thread count or on how the step's tokens were split.

use super::kv::KvPages;
use super::math::{exp, larger};
use super::simd::Simd;
use super::threads::{Disjoint, Threads};

pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

pub use crate::model::reference::AttentionMask;

/// Tokens of a step one task takes; a step of up to twice as many is one block (a warm
/// request's new message: more rows share each key, and the threads split its keys).
const TOKEN_BLOCK: usize = 16;

/// Rows from which a task's scores and weighted values go through register tiles: below it
/// (decode: one to a few heads of one token) most of a tile's rows would be padding.
const TILE_MIN_ROWS: usize = 8;

/// Keys per part: a row's keys split at absolute multiples of it, each part's softmax
/// (maximum, sum, weighted values) merged into the row's in key order, whether the parts ran in
/// one task or in several: so a short step over a long cache spreads over the threads by its
/// keys, and a row's result depends neither on the thread count nor on the step it is in.
/// Decode's rows, a row at a time in f32, split finer: their tasks are few otherwise.
const KEY_PART: usize = 256;
const DECODE_KEY_PART: usize = 128;

/// `out` (T, H·D) = softmax(q·Kᵀ · scale) · V for each query head, over layer `layer`'s pages,
/// `q` (T, H·D) rotated; keys outside a query's window (`mask`) are never read. `ints`: the
/// layer's integer keys and values, brought up to date by a step that uses them.
///
/// Rows (token, head) go in groups of a block of tokens × the query heads of one KV head, each
/// converted key and value row read once for all of them. A group's keys are split into parts
/// (`KEY_PART`); a task takes a group's parts in order, or, when groups are fewer than twice
/// the threads, one part of one group, and the parts of a row are merged after.
#[allow(clippy::too_many_arguments)]
pub fn attention<S: Simd>(threads: &Threads, shape: &AttentionShape, mask: AttentionMask, kv: &KvPages, ints: &mut IntKv, layer: usize, pages: &[u32], start_pos: usize, q: &[f32], out: &mut [f32]) {
    let (h, hkv, d) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
    let t = q.len() / (h * d);
    let group = h / hkv;
    let decode = t * group < TILE_MIN_ROWS;
    let blocks = if t <= 2 * TOKEN_BLOCK { 1 } else { t.div_ceil(TOKEN_BLOCK) };
    let split = blocks * hkv < 2 * threads.count();
    // Blocks of equal size, so tasks take equal time (a step of 40: 14, 14 and 12, not 16, 16 and 8).
    let per_block = t.div_ceil(blocks);
    let part = if decode { DECODE_KEY_PART } else { KEY_PART };
    let groups = blocks * hkv;
    let tokens = |g: usize| (g / hkv) * per_block..((g / hkv + 1) * per_block).min(t);
    // Parts group g's rows see: its first token's first key to its last token.
    let parts = |g: usize| mask.first_key(start_pos + tokens(g).start) / part..(start_pos + tokens(g).end - 1) / part + 1;
    if !decode {
        ints.update::<S>(threads, kv, layer, pages, hkv, d, mask.first_key(start_pos), start_pos + t);
    }
    let int_kv = (!decode).then_some(&*ints);
    // Group g's rows (token, head).
    let rows = |g: usize| -> Vec<(usize, usize)> {
        let heads = (g % hkv) * group..(g % hkv + 1) * group;
        tokens(g).flat_map(|ti| heads.clone().map(move |hi| (ti, hi))).collect()
    };
    let task_of = |g: usize, parts: std::ops::Range<usize>| {
        let tokens = tokens(g);
        let lo = (parts.start * part).max(mask.first_key(start_pos + tokens.start));
        let end = (parts.end * part).min(start_pos + tokens.end);
        Task { kv, layer, pages, kv_head: g % hkv, h, d, mask, start_pos, rows: rows(g), lo, span: end - lo }
    };
    // Part `p` of task `task`'s keys, as (row, maximum, sum, weighted values) to `emit`.
    let run_part = |task: &Task, p: usize, emit: &mut dyn FnMut(usize, f32, f32, &[f32])| {
        let lo = (p * part).max(task.lo);
        let end = ((p + 1) * part).min(task.lo + task.span);
        let task = Task { rows: task.rows.clone(), lo, span: end - lo, ..*task };
        match int_kv.filter(|_| task.rows.len() >= TILE_MIN_ROWS) {
            Some(int_kv) => tiled::<S>(&task, int_kv, q, emit),
            None => by_rows::<S>(&task, q, emit),
        }
    };
    // A row's running softmax: maximum, sum, then the d weighted values.
    let stride = d + 2;
    let out_rows = Disjoint::new(out);
    // Row (ti, hi) of `out`, given its merged softmax.
    let finish = |(ti, hi): (usize, usize), state: &[f32]| {
        let inv = 1.0 / state[1];
        for (o, a) in out_rows.range((ti * h + hi) * d, d).iter_mut().zip(&state[2..]) {
            *o = a * inv;
        }
    };
    if !split {
        // Task g takes group g's parts in order and writes its rows: disjoint.
        threads.run(groups, |g| {
            let task = task_of(g, parts(g));
            let mut states = vec![0f32; task.rows.len() * stride];
            for p in parts(g) {
                run_part(&task, p, &mut |r, max, sum, acc| merge(&mut states[r * stride..(r + 1) * stride], max, sum, acc));
            }
            for (&row, state) in task.rows.iter().zip(states.chunks_exact(stride)) {
                finish(row, state);
            }
        });
        return;
    }
    // A task per (group, part), each writing its own rows' partial softmax; then each row's
    // parts merged in key order.
    let tasks: Vec<(usize, usize)> = (0..groups).flat_map(|g| parts(g).map(move |p| (g, p))).collect();
    let rows_per_task = per_block * group;
    let mut partials = vec![0f32; tasks.len() * rows_per_task * stride];
    {
        let slots = Disjoint::new(&mut partials);
        threads.run(tasks.len(), |i| {
            let (g, p) = tasks[i];
            let slot = slots.range(i * rows_per_task * stride, rows_per_task * stride);
            run_part(&task_of(g, p..p + 1), p, &mut |r, max, sum, acc| {
                let s = &mut slot[r * stride..(r + 1) * stride];
                s[0] = max;
                s[1] = sum;
                s[2..].copy_from_slice(acc);
            });
        });
    }
    let mut state = vec![0f32; stride];
    let mut first = 0;
    for g in 0..groups {
        let n = parts(g).len();
        for (r, row) in rows(g).into_iter().enumerate() {
            state.fill(0.0);
            for i in first..first + n {
                let s = &partials[(i * rows_per_task + r) * stride..][..stride];
                merge(&mut state, s[0], s[1], &s[2..]);
            }
            finish(row, &state);
        }
        first += n;
    }
}

/// Merges a part's softmax (its maximum, sum of weights and weighted values) into a row's
/// running one `state` (the same, zeros before the first part): a part the row sees no key of
/// (sum 0) adds nothing; the first is taken as it is.
#[inline(always)]
fn merge(state: &mut [f32], max: f32, sum: f32, values: &[f32]) {
    if sum == 0.0 {
        return;
    }
    if state[1] == 0.0 {
        state[0] = max;
        state[1] = sum;
        state[2..].copy_from_slice(values);
        return;
    }
    let new = larger(state[0], max);
    let (a, b) = (exp(state[0] - new), exp(max - new));
    state[0] = new;
    state[1] = state[1] * a + sum * b;
    for (s, v) in state[2..].iter_mut().zip(values) {
        *s = *s * a + v * b;
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
    fn key_row(&self, p: usize) -> &[u16] {
        kv_row(self.kv, self.kv.keys(self.layer), self.pages, self.kv_head, self.d, p)
    }
    fn value_row(&self, p: usize) -> &[u16] {
        kv_row(self.kv, self.kv.values(self.layer), self.pages, self.kv_head, self.d, p)
    }
}

/// KV head `head`'s key (`of`: a layer's `kv.keys`) or value (`kv.values`) row of `d` at
/// position p, as f16 bits.
fn kv_row<'k>(kv: &KvPages, of: &'k [u16], pages: &[u32], head: usize, d: usize, p: usize) -> &'k [u16] {
    &of[kv.slot(pages, p) + head * d..][..d]
}

#[cfg(not(target_arch = "wasm32"))]
mod tile {
    /// Keys and 8-row vectors of a score tile; rows and 8-lane value vectors of a weighted-sum
    /// tile: eight accumulators (of 16 AVX2 or 32 NEON registers).
    pub const QK: (usize, usize) = (4, 2);
    pub const PV: (usize, usize) = (4, 2);
}
#[cfg(target_arch = "wasm32")]
mod tile {
    /// Four accumulators: each is two 128-bit registers, and engines map wasm's onto x86's 16.
    pub const QK: (usize, usize) = (4, 1);
    pub const PV: (usize, usize) = (4, 1);
}

/// Lanes of the SIMD layer's accumulators: rows per score vector, dimensions per value vector.
const LANES: usize = 8;

/// Keys per block: a block's scores and weights stay in L1. Blocks end at multiples of it
/// (absolute positions), so a row's sums do not depend on which other rows share its task: a
/// step split differently (a warm request's suffix, a cold prompt) gives each row the same bits.
const KEY_BLOCK: usize = 64;

/// Largest magnitude of a value row's integers (each row scaled to it), and the bound on the
/// sum of a block's weight integers for one row: Σ weight · value, with each weight rounded (64
/// keys, half a unit each), fits an i32. Between the two a row's error is least for the
/// near-flat weights where it matters (the errors of weights add, those of values average).
const VALUE_RANGE: f32 = 16_383.0;
const WEIGHT_SUM: f32 = 131_000.0;

/// Largest magnitude of query and key integers, and the pairs of dimensions a score tile sums
/// in i32 before it adds them to its f32 sums: 16 products, each at most the range squared.
const QK_RANGE: f32 = 11_585.0;
const QK_PAIRS_PER_SUM: usize = 8;

/// `row` as integers of magnitude at most `range` (rounded to nearest) into `out`, its padding
/// zero; gives the scale that turns them back.
#[inline(always)]
fn to_ints<S: Simd>(row: &[f32], range: f32, out: &mut [i16]) -> f32 {
    let whole = row.len() / LANES * LANES;
    let chunks = || row[..whole].chunks_exact(LANES).filter_map(|c| c.try_into().ok());
    let max = chunks().fold(S::zero(), |m, c| S::abs_max(m, S::loadf(c)));
    let max = row[whole..].iter().fold(S::hmax(max), |m, x| larger(m, x.abs()));
    out.fill(0);
    if max == 0.0 {
        return 0.0;
    }
    let inv = range / max;
    for (c, o) in chunks().zip(out.chunks_exact_mut(LANES)) {
        o.copy_from_slice(&S::to_i16(S::loadf(c), S::splat(inv)));
    }
    for (o, x) in out[whole..].iter_mut().zip(&row[whole..]) {
        *o = (x * inv).round_ties_even() as i16;
    }
    max / range
}

/// One layer's keys and values as 16-bit integers with a scale per row, so a step's products
/// run on integer dot instructions (twice the multiply-adds per instruction of f32 on 128-bit
/// SIMD). The backend keeps one per layer between steps: positions whose pages are unchanged
/// since they were converted (the same page at the same place of the page table, at the same
/// version) are not converted again, so a step over a cached prefix (tools, a conversation)
/// or a long prompt's later chunks convert only their own new keys. Values are stored in pairs
/// of positions (even, odd: absolute), interleaved by dimension, so a weighted sum takes two
/// keys per product. Its buffers grow to the longest sequence a step has attended to: as many
/// bytes again as that sequence's f16 keys and values.
#[derive(Default)]
pub struct IntKv {
    /// First position held (even). The buffers hold positions from it: the converted ones,
    /// then ones a score tile may read past a step's last key (finite, never weighted).
    lo: usize,
    heads: usize,
    /// Dimensions per row: the head's, padded to 16.
    dp: usize,
    /// (position, KV head, dp).
    keys: Vec<i16>,
    /// (position, KV head).
    key_scale: Vec<f32>,
    /// (pair, KV head, 2·dp): element 2c + i is dimension c of the pair's position i.
    values: Vec<i16>,
    /// (position, KV head).
    value_scale: Vec<f32>,
    /// Page-table entries from `lo`'s on, each (page, its version when converted): positions
    /// `lo..converted` hold those pages' values.
    held: Vec<(u32, u64)>,
    converted: usize,
    /// Positions converted so far.
    conversions: u64,
}

/// Positions per conversion task (even).
const CONVERT_CHUNK: usize = 128;

impl IntKv {
    /// Holds positions `first..end` of `layer`: converts, on the threads, those not held as
    /// they are in the pages now.
    #[allow(clippy::too_many_arguments)]
    fn update<S: Simd>(&mut self, threads: &Threads, kv: &KvPages, layer: usize, pages: &[u32], heads: usize, d: usize, first: usize, end: usize) {
        let dp = d.div_ceil(16) * 16;
        let ps = kv.page_size;
        if (heads, dp) != (self.heads, self.dp) || first < self.lo {
            (self.heads, self.dp) = (heads, dp);
            self.restart(first / 2 * 2);
        }
        let mut valid = self.valid(kv, layer, pages);
        // Positions before the window are never read: drop them once they are as many as the
        // ones read, or where they are stale (a stale position must not pass as held later).
        if valid < first || first - self.lo > end - first {
            self.drop_before(first / 2 * 2, ps);
            valid = self.valid(kv, layer, pages);
        }
        // Entries of the pages still held (wholly or in part), then the step's others.
        let valid = valid.min(end);
        self.held.truncate(if valid > self.lo { valid.div_ceil(ps) - self.lo / ps } else { 0 });
        self.held.extend((self.lo / ps + self.held.len()..end.div_ceil(ps)).map(|i| (pages[i], kv.version(layer, pages[i]))));
        // Whole pairs from the first position not held (lo is even); positions before the
        // window from lo on are converted too, so every position held is what its page holds.
        let from = valid / 2 * 2;
        self.converted = end;
        // Room for a score tile's keys past the last (zeros until converted).
        let n = (end + tile::QK.0 - 1 - self.lo).div_ceil(2) * 2;
        if n > self.len() {
            self.keys.resize(n * heads * dp, 0);
            self.key_scale.resize(n * heads, 0.0);
            self.values.resize(n * heads * dp, 0);
            self.value_scale.resize(n * heads, 0.0);
        }
        if from >= end {
            return;
        }
        let (lo, count) = (self.lo, end.div_ceil(2) * 2 - from);
        let at = from - lo;
        self.conversions += count as u64;
        let (k, ks) = (Disjoint::new(&mut self.keys[at * heads * dp..(at + count) * heads * dp]), Disjoint::new(&mut self.key_scale[at * heads..(at + count) * heads]));
        let (v, vs) = (Disjoint::new(&mut self.values[at * heads * dp..(at + count) * heads * dp]), Disjoint::new(&mut self.value_scale[at * heads..(at + count) * heads]));
        let (layer_keys, layer_values) = (kv.keys(layer), kv.values(layer));
        // Task c converts its chunk of positions, every head's rows: disjoint.
        threads.run(count.div_ceil(CONVERT_CHUNK), |c| {
            let chunk = c * CONVERT_CHUNK..((c + 1) * CONVERT_CHUNK).min(count);
            let (keys, key_scale) = (k.range(chunk.start * heads * dp, chunk.len() * heads * dp), ks.range(chunk.start * heads, chunk.len() * heads));
            let (values, value_scale) = (v.range(chunk.start * heads * dp, chunk.len() * heads * dp), vs.range(chunk.start * heads, chunk.len() * heads));
            let mut row = vec![0f32; d];
            let mut ints = [vec![0i16; dp], vec![0i16; dp]];
            // Pairs of positions (chunks start even); one past the step (not written yet) is zeros.
            for j in 0..chunk.len() / 2 {
                for head in 0..heads {
                    for (half, ints) in ints.iter_mut().enumerate() {
                        let (i, p) = (2 * j + half, from + chunk.start + 2 * j + half);
                        let r = i * heads + head;
                        if p < end {
                            widen::<S>(kv_row(kv, layer_keys, pages, head, d, p), &mut row);
                            key_scale[r] = to_ints::<S>(&row, QK_RANGE, &mut keys[r * dp..(r + 1) * dp]);
                            widen::<S>(kv_row(kv, layer_values, pages, head, d, p), &mut row);
                            value_scale[r] = to_ints::<S>(&row, VALUE_RANGE, ints);
                        } else {
                            keys[r * dp..(r + 1) * dp].fill(0);
                            ints.fill(0);
                            (key_scale[r], value_scale[r]) = (0.0, 0.0);
                        }
                    }
                    let pair = (j * heads + head) * 2 * dp;
                    interleave::<S>(&ints[0], &ints[1], &mut values[pair..pair + 2 * dp]);
                }
            }
        });
    }

    /// Positions converted so far (each for every KV head), pairs' padding included.
    pub fn conversions(&self) -> u64 {
        self.conversions
    }

    /// Positions the buffers hold from `lo`.
    fn len(&self) -> usize {
        self.key_scale.len() / self.heads.max(1)
    }

    /// Starts over at `lo` with nothing held.
    fn restart(&mut self, lo: usize) {
        (self.lo, self.converted) = (lo, lo);
        self.held.clear();
        self.keys.clear();
        self.key_scale.clear();
        self.values.clear();
        self.value_scale.clear();
    }

    /// The first position from `lo` not held as it is in `pages` now.
    fn valid(&self, kv: &KvPages, layer: usize, pages: &[u32]) -> usize {
        let ps = kv.page_size;
        let mut valid = self.lo;
        for (i, &(page, version)) in self.held.iter().enumerate() {
            let entry = self.lo / ps + i;
            if pages.get(entry) != Some(&page) || kv.version(layer, page) != version {
                break;
            }
            valid = ((entry + 1) * ps).min(self.converted);
        }
        valid
    }

    /// Moves the first position held up to `lo` (even, at least the current), shifting what is
    /// held after it to the buffers' start.
    fn drop_before(&mut self, lo: usize, page_size: usize) {
        let shift = lo - self.lo;
        if shift == 0 {
            return;
        }
        let n = self.len();
        if shift >= n || self.converted <= lo {
            return self.restart(lo);
        }
        let (h, dp) = (self.heads, self.dp);
        for (rows, width) in [(&mut self.keys, h * dp), (&mut self.values, h * dp)] {
            rows.copy_within(shift * width.., 0);
            rows.truncate((n - shift) * width);
        }
        for scales in [&mut self.key_scale, &mut self.value_scale] {
            scales.copy_within(shift * h.., 0);
            scales.truncate((n - shift) * h);
        }
        // Entries are per page-table index from lo's: drop those of pages wholly before it.
        self.held.drain(..(lo / page_size - self.lo / page_size).min(self.held.len()));
        self.lo = lo;
    }
    #[inline(always)]
    fn key(&self, head: usize, p: usize) -> &[i16] {
        &self.keys[((p - self.lo) * self.heads + head) * self.dp..][..self.dp]
    }
    #[inline(always)]
    fn key_scale(&self, head: usize, p: usize) -> f32 {
        self.key_scale[(p - self.lo) * self.heads + head]
    }
    #[inline(always)]
    fn value_scale(&self, head: usize, p: usize) -> f32 {
        self.value_scale[(p - self.lo) * self.heads + head]
    }
    /// Where the value pair holding positions 2j and 2j + 1 (j absolute) starts in `values`;
    /// the next pair's is `heads · 2 · dp` on.
    #[inline(always)]
    fn value_pair_at(&self, head: usize, j: usize) -> usize {
        ((2 * j - self.lo) / 2 * self.heads + head) * 2 * self.dp
    }
}

/// The task as integer matrix products in register tiles over blocks of keys with a running
/// maximum (online softmax), given to `emit` as `by_rows` gives it. Scores: queries (scaled by the mask's scale) and keys as integers
/// with a scale per row, dotted in i32. A block's scores are kept keys × rows, so the max, exp
/// and sum run across rows as vectors. Weighted sum: each weight times its value row's scale,
/// as integers with a scale per row and block, two keys per product; each block's i32 sums
/// join the f32 outputs, rescaled when a row's maximum grows.
fn tiled<S: Simd>(task: &Task, kv: &IntKv, q: &[f32], mut emit: impl FnMut(usize, f32, f32, &[f32])) {
    let (d, dp, head, lo, end) = (task.d, kv.dp, task.kv_head, task.lo, task.lo + task.span);
    let n_rows = task.rows.len();
    let rp = n_rows.div_ceil(LANES) * LANES;

    // qt (rp / LANES, dp / 2, LANES, 2): the queries as integers, a row vector's pairs of
    // dimensions in order, so a score tile is keys × row vectors with each key's pair broadcast
    // and no horizontal sums, reading each row vector's pairs in one run; padding rows and
    // dimensions are zero.
    let mut qt = vec![0i16; rp * dp];
    let mut q_scale = vec![0f32; rp];
    let mut scaled = vec![0f32; d];
    let mut ints = vec![0i16; dp];
    for (r, q_scale) in q_scale.iter_mut().enumerate().take(n_rows) {
        for (s, x) in scaled.iter_mut().zip(task.q_row(q, r)) {
            *s = x * task.mask.scale;
        }
        *q_scale = to_ints::<S>(&scaled, QK_RANGE, &mut ints);
        let (v, lane) = (r / LANES, r % LANES);
        for (c, pair) in ints.chunks_exact(2).enumerate() {
            let at = ((v * dp / 2 + c) * LANES + lane) * 2;
            qt[at..at + 2].copy_from_slice(pair);
        }
    }
    // Keys every row sees; scores of others are masked to -inf (exp gives 0).
    let seen_by_all = task.keys(n_rows - 1).start..task.keys(0).end;
    let mut max = vec![f32::NEG_INFINITY; rp];
    let mut sums = vec![0f32; rp];
    // acc (rp, dp): Σ weight · value row, scaled to the running maximum.
    let mut acc = vec![0f32; rp * dp];
    // A block's scores, then weights (a tile may write one key row past the block).
    let mut scores = vec![0f32; (KEY_BLOCK + tile::QK.0) * rp];
    // A block's weights as integers, pairs of keys interleaved: (rp / PV rows, pair, PV rows,
    // 2), so a weighted-sum tile reads its rows' weights in one run; and each row's scale for
    // them and its inverse.
    const PV_ROWS: usize = tile::PV.0;
    let mut wi = vec![0i16; WEIGHT_PAIRS * rp * 2];
    let mut w_scale = vec![0f32; rp];
    let mut w_inv = vec![0f32; rp];
    let zeros = vec![0f32; rp];
    let mut rescale = vec![1f32; rp];
    let mut shift = vec![0f32; rp];
    let mut b0 = lo;
    while b0 < end {
        let n = (b0 / KEY_BLOCK * KEY_BLOCK + KEY_BLOCK).min(end) - b0;
        score_tiles::<S>(&qt, &q_scale, rp, kv, head, b0, n, &mut scores);
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
        }
        // Maxima a row vector at a time, in registers (a maximum kept in memory becomes a
        // masked store, slow on x86).
        for (v, m) in shift.chunks_exact_mut(LANES).enumerate() {
            let mut top: [f32; LANES] = m.try_into().unwrap_or([f32::NEG_INFINITY; LANES]);
            for row in scores.chunks_exact(rp).take(n) {
                for (t, s) in top.iter_mut().zip(&row[v * LANES..(v + 1) * LANES]) {
                    *t = larger(*t, *s);
                }
            }
            m.copy_from_slice(&top);
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
        // Weights, then a row vector at a time (sums in registers, as a sum kept in memory
        // is not vectorised): their sums, and the weights times their value row's scale
        // (what the integers hold), whose largest and total (weights are not negative: the
        // largest is the largest magnitude) give each row's scale for its integers.
        for row in scores.chunks_exact_mut(rp).take(n) {
            for (s, shift) in row.iter_mut().zip(&shift) {
                *s = exp(*s - shift);
            }
        }
        for (v, ((sum, scale), inv)) in sums.chunks_exact_mut(LANES).zip(w_scale.chunks_exact_mut(LANES)).zip(w_inv.chunks_exact_mut(LANES)).enumerate() {
            let Ok(sum) = <&mut [f32; LANES]>::try_from(sum) else { continue };
            let (mut s, mut t, mut m) = (S::loadf(sum), S::zero(), S::zero());
            for (i, row) in scores.chunks_exact_mut(rp).take(n).enumerate() {
                let Ok(w) = <&mut [f32; LANES]>::try_from(&mut row[v * LANES..(v + 1) * LANES]) else { continue };
                let x = S::loadf(w);
                s = S::addf(s, x);
                let x = S::mulf(x, S::splat(kv.value_scale(head, b0 + i)));
                S::storef(x, w);
                m = S::abs_max(m, x);
                t = S::addf(t, x);
            }
            S::storef(s, sum);
            let (mut top, mut total) = ([0f32; LANES], [0f32; LANES]);
            S::storef(m, &mut top);
            S::storef(t, &mut total);
            for (((scale, inv), m), total) in scale.iter_mut().zip(inv.iter_mut()).zip(top).zip(total) {
                *scale = larger(m / VALUE_RANGE, total / WEIGHT_SUM);
                *inv = if *scale > 0.0 { 1.0 / *scale } else { 0.0 };
            }
        }
        // Pairs of absolute positions; a pair's key outside the block weighs 0.
        let (first_pair, pairs) = (b0 / 2, (b0 + n).div_ceil(2) - b0 / 2);
        let weights = |p: usize| if (b0..b0 + n).contains(&p) { &scores[(p - b0) * rp..(p - b0 + 1) * rp] } else { &zeros[..] };
        for j in 0..pairs {
            let p = 2 * (first_pair + j);
            let (even, odd) = (weights(p), weights(p + 1));
            for (v, ((e, o), inv)) in even.chunks_exact(LANES).zip(odd.chunks_exact(LANES)).zip(w_inv.chunks_exact(LANES)).enumerate() {
                let (Ok(e), Ok(o), Ok(inv)) = (e.try_into(), o.try_into(), inv.try_into()) else { continue };
                let inv = S::loadf(inv);
                let mut w = [0i16; 2 * LANES];
                S::interleave(S::to_i16(S::loadf(e), inv), S::to_i16(S::loadf(o), inv), &mut w);
                for (i, rows) in w.chunks_exact(2 * PV_ROWS).enumerate() {
                    let at = (((v * LANES / PV_ROWS + i) * WEIGHT_PAIRS) + j) * 2 * PV_ROWS;
                    wi[at..at + 2 * PV_ROWS].copy_from_slice(rows);
                }
            }
        }
        weight_tiles::<S>(&wi, pairs, &w_scale, rp, kv, head, first_pair, &mut acc);
        b0 += n;
    }
    for r in 0..n_rows {
        emit(r, max[r], sums[r], &acc[r * dp..r * dp + d]);
    }
}

/// Scores of keys `b0..b0 + n` against every row of `qt` (rp / LANES, dp / 2, LANES, 2), into
/// `out` (keys, rp), whole tiles of keys (the last may take keys past the block).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn score_tiles<S: Simd>(qt: &[i16], q_scale: &[f32], rp: usize, kv: &IntKv, head: usize, b0: usize, n: usize, out: &mut [f32]) {
    const M: usize = tile::QK.0;
    for k0 in (0..n).step_by(M) {
        let keys: [&[i16]; M] = std::array::from_fn(|i| kv.key(head, b0 + k0 + i));
        let key_scale: [f32; M] = std::array::from_fn(|i| kv.key_scale(head, b0 + k0 + i));
        let out = &mut out[k0 * rp..(k0 + M) * rp];
        let mut v = 0;
        while v + tile::QK.1 <= rp / LANES {
            score_tile::<S, M, { tile::QK.1 }>(qt, q_scale, rp, kv.dp, v, keys, key_scale, out);
            v += tile::QK.1;
        }
        while v < rp / LANES {
            score_tile::<S, M, 1>(qt, q_scale, rp, kv.dp, v, keys, key_scale, out);
            v += 1;
        }
    }
}

/// Dimensions a score tile sums in i32 (pairs of them), and a row vector's query integers over
/// them.
const QK_GROUP: usize = 2 * QK_PAIRS_PER_SUM;
const QK_GROUP_ROWS: usize = LANES * QK_GROUP;

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn score_tile<S: Simd, const M: usize, const N: usize>(qt: &[i16], q_scale: &[f32], rp: usize, dp: usize, v: usize, keys: [&[i16]; M], key_scale: [f32; M], out: &mut [f32]) {
    let q_scale: [S::F; N] = std::array::from_fn(|j| q_scale[(v + j) * LANES..(v + j + 1) * LANES].try_into().map_or(S::zero(), S::loadf));
    // Sums in f32 of i32 sums over a group of dimensions, then scaled by the row's and the
    // key's scales.
    let mut sums = [[S::zero(); N]; M];
    for g in 0..dp / QK_GROUP {
        // The group's dimensions of each key and each row vector's queries, as arrays: the loop
        // over them has no bounds checks (none is missing: keys and rows hold dp dimensions).
        let kg: [&[i16; QK_GROUP]; M] = std::array::from_fn(|i| keys[i].get(g * QK_GROUP..(g + 1) * QK_GROUP).and_then(|k| k.try_into().ok()).unwrap_or(&[0; QK_GROUP]));
        let qg: [&[i16; QK_GROUP_ROWS]; N] = std::array::from_fn(|j| qt.get((v + j) * dp * LANES + g * QK_GROUP_ROWS..).and_then(|q| q.get(..QK_GROUP_ROWS)).and_then(|q| q.try_into().ok()).unwrap_or(&[0; QK_GROUP_ROWS]));
        let mut acc = [[S::zeroi(); N]; M];
        for c in 0..QK_PAIRS_PER_SUM {
            for (acc, key) in acc.iter_mut().zip(kg) {
                let pair = [key[2 * c], key[2 * c + 1]];
                for (a, q) in acc.iter_mut().zip(qg) {
                    if let Ok(q) = <&[i16; 2 * LANES]>::try_from(&q[2 * LANES * c..2 * LANES * (c + 1)]) {
                        *a = S::dot_pair_splat(*a, pair, q);
                    }
                }
            }
        }
        for (sums, acc) in sums.iter_mut().zip(&acc) {
            for (s, a) in sums.iter_mut().zip(acc) {
                *s = S::addf(*s, S::to_f32(*a));
            }
        }
    }
    for (i, sums) in sums.iter().enumerate() {
        let ks = S::splat(key_scale[i]);
        for ((j, s), qs) in sums.iter().enumerate().zip(q_scale) {
            let at = i * rp + (v + j) * LANES;
            if let Ok(o) = <&mut [f32; 8]>::try_from(&mut out[at..at + LANES]) {
                S::storef(S::mulf(S::mulf(*s, qs), ks), o);
            }
        }
    }
}

/// Pairs of keys a block's weights span at most (a block starting at an odd position).
const WEIGHT_PAIRS: usize = KEY_BLOCK / 2 + 1;
// A row vector's weights split into whole weighted-sum tiles' rows.
const _: () = assert!(LANES % tile::PV.0 == 0);

/// `acc` (rp, dp) += Σ over `pairs` value pairs from `first_pair` of the weight pairs `wi`
/// (rp / PV rows, WEIGHT_PAIRS, PV rows, 2) times the pair's values, each row's sum times its
/// `w_scale`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weight_tiles<S: Simd>(wi: &[i16], pairs: usize, w_scale: &[f32], rp: usize, kv: &IntKv, head: usize, first_pair: usize, acc: &mut [f32]) {
    const M: usize = tile::PV.0;
    let stride = kv.heads * 2 * kv.dp;
    let values = kv.values.get(kv.value_pair_at(head, first_pair)..).unwrap_or(&[]);
    for (r, w) in (0..rp).step_by(M).zip(wi.chunks_exact(WEIGHT_PAIRS * 2 * M)) {
        for c in (0..kv.dp).step_by(tile::PV.1 * LANES) {
            let values = values.get(2 * c..).unwrap_or(&[]);
            weight_tile::<S, M, { tile::PV.1 }>(&w[..pairs * 2 * M], w_scale, values, stride, kv.dp, r, c, acc);
        }
    }
}

/// Rows `r..r + M` of `acc`, dimensions `c..c + 8N`: `values` from dimension c of the first
/// pair on, a pair every `stride`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weight_tile<S: Simd, const M: usize, const N: usize>(wi: &[i16], w_scale: &[f32], values: &[i16], stride: usize, dp: usize, r: usize, c: usize, acc: &mut [f32]) {
    let mut sums = [[S::zeroi(); N]; M];
    for (w, pair) in wi.chunks_exact(2 * M).zip(values.chunks(stride)) {
        let Some(pair) = pair.get(..2 * LANES * N) else { continue };
        for (s, w) in sums.iter_mut().zip(w.chunks_exact(2)) {
            let w = [w[0], w[1]];
            for (s, vv) in s.iter_mut().zip(pair.chunks_exact(2 * LANES)) {
                if let Ok(vv) = vv.try_into() {
                    *s = S::dot_pair_splat(*s, w, vv);
                }
            }
        }
    }
    for (i, s) in sums.iter().enumerate() {
        let scale = S::splat(w_scale[r + i]);
        for (v, s) in s.iter().enumerate() {
            let at = (r + i) * dp + c + v * LANES;
            if let Ok(o) = <&mut [f32; 8]>::try_from(&mut acc[at..at + LANES]) {
                let sum = S::fmadd(S::loadf(o), S::to_f32(*s), scale);
                S::storef(sum, o);
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
            widen::<S>(task.key_row(p + k), key);
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
        *max = s.iter().copied().fold(f32::NEG_INFINITY, larger);
        s.iter_mut().for_each(|x| *x = exp(*x - *max));
        *sum = s.iter().sum();
    }
    // The value rows widened once, then each output row summed over its keys with its
    // accumulator in registers (a row at a time, not a key at a time, which would load and
    // store every accumulator for every key).
    let mut values = vec![0f32; span * d];
    for (p, v) in (lo..lo + span).zip(values.chunks_exact_mut(d)) {
        widen::<S>(task.value_row(p), v);
    }
    let mut acc = vec![0f32; d];
    for r in 0..rows {
        let keys = task.keys(r);
        weighted_sum::<S>(&scores[r * span + keys.start - lo..r * span + keys.end - lo], &values[(keys.start - lo) * d..(keys.end - lo) * d], &mut acc);
        emit(r, maxes[r], sums[r], &acc);
    }
}

/// `a[0], b[0], a[1], b[1], ...` into `out` (twice their length, a multiple of 8).
#[inline(always)]
fn interleave<S: Simd>(a: &[i16], b: &[i16], out: &mut [i16]) {
    for ((a, b), o) in a.chunks_exact(8).zip(b.chunks_exact(8)).zip(out.chunks_exact_mut(16)) {
        if let (Ok(a), Ok(b), Ok(o)) = (a.try_into(), b.try_into(), o.try_into()) {
            S::interleave(a, b, o);
        }
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
