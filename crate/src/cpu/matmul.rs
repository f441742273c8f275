//! Matrix products `y = x · wᵀ` on the CPU over weights in their GGUF block formats: one or
//! several weights (q, k and v; gate and up) as one product whose output columns are the
//! weights' rows one after another, split by rows over the threads.
//!
//! A task owns a run of output rows. It walks them in blocks small enough to stay in L1 while
//! every token passes over them, four tokens at a time (each weight block is unpacked once
//! for the four), so a prefill batch reads each weight from memory once per block, not per
//! token.

use std::ops::Range;

use super::dot::{float_kernel, quant_kernel, takes_q16, Q16Block};
use super::simd::Simd;
use super::threads::{Disjoint, Threads};
use crate::gguf::GgmlType;

/// A weight matrix of `n` rows of `k` values in `ty`'s block format (GGUF's layout).
pub struct CpuWeight {
    pub ty: GgmlType,
    pub k: usize,
    pub n: usize,
    pub row_bytes: usize,
    pub data: Vec<u8>,
}

impl CpuWeight {
    /// The weight over `data` (n rows of k values in `ty`'s format). `None` when the bytes do
    /// not make that shape, or `k` is not a whole number of the activations' 32-value blocks
    /// (quantized types).
    pub fn new(ty: GgmlType, k: usize, n: usize, data: Vec<u8>) -> Option<Self> {
        let row_bytes = ty.row_bytes(k)?;
        if k == 0 || n == 0 || (takes_q16(ty) && k % 32 != 0) || row_bytes.checked_mul(n)? != data.len() {
            return None;
        }
        Some(Self { ty, k, n, row_bytes, data })
    }

    pub fn row(&self, i: usize) -> &[u8] {
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }
}

/// A batch's input rows (T, K) in f32 and, for quantized weights, quantized once per token.
pub struct Input<'a> {
    pub t: usize,
    pub k: usize,
    pub x: &'a [f32],
    /// (T, K / 32) blocks; empty when no weight of the product is quantized.
    pub q16: &'a [Q16Block],
}

/// Rows one task takes at least: fewer makes the task overhead show.
const MIN_TASK_ROWS: usize = 16;
/// Rows walked by every token before the next block: 16 rows of a 4-bit 2k-wide weight are
/// 18 KiB, inside L1 with the tokens' activations beside them.
const BLOCK_ROWS: usize = 16;
/// Tokens whose dot products share each unpacked weight block.
const TOKENS: usize = 4;

/// `y[:, at..at + Σn] (=|+=) x · [w₀; w₁; …]ᵀ`, with `y` (T, y_cols) row-major; `add` adds to
/// what `y` holds (the residual stream) instead of overwriting it.
pub fn matmul<S: Simd>(threads: &Threads, weights: &[&CpuWeight], input: &Input, y: &mut [f32], y_cols: usize, at: usize, add: bool) {
    let rows: usize = weights.iter().map(|w| w.n).sum();
    let tasks = threads.count() * 4;
    let chunk = rows.div_ceil(tasks).max(MIN_TASK_ROWS);
    let out = Disjoint::new(y);
    // Task i writes columns at + [i·chunk, (i+1)·chunk) of every token's row: disjoint.
    threads.run(rows.div_ceil(chunk), |task| {
        let (mut first, end) = (task * chunk, ((task + 1) * chunk).min(rows));
        let mut col = 0;
        for w in weights {
            // The part of this task's rows that falls in w.
            let (lo, hi) = (first.max(col), end.min(col + w.n));
            if lo < hi {
                rows_of::<S>(w, lo - col..hi - col, input, &out, y_cols, at + lo, add);
                first = hi;
            }
            col += w.n;
        }
    });
}

/// Rows `rows` of `w` for every token, into columns `col..` of `out`.
fn rows_of<S: Simd>(w: &CpuWeight, rows: Range<usize>, input: &Input, out: &Disjoint<f32>, y_cols: usize, col: usize, add: bool) {
    let dst = Dst { out, y_cols, col: col - rows.start, add };
    if takes_q16(w.ty) {
        if let (Some(four), Some(one)) = (quant_kernel::<S, TOKENS>(w.ty), quant_kernel::<S, 1>(w.ty)) {
            walk(w, rows, input.t, input.k / 32, input.q16, four, one, &dst);
        }
    } else if let (Some(four), Some(one)) = (float_kernel::<S, TOKENS>(w.ty), float_kernel::<S, 1>(w.ty)) {
        walk(w, rows, input.t, input.k, input.x, four, one, &dst);
    }
}

/// Where row r of token t goes: `out[t · y_cols + col + r]`, stored or added.
struct Dst<'a> {
    out: &'a Disjoint<f32>,
    y_cols: usize,
    col: usize,
    add: bool,
}

impl Dst<'_> {
    #[inline(always)]
    fn put(&self, token: usize, row: usize, v: f32) {
        let y = self.out.at(token * self.y_cols + self.col + row);
        *y = if self.add { *y + v } else { v };
    }
}

/// The blocked walk over rows and tokens; `acts` holds `per_token` elements a token (quantized
/// blocks or f32 values, as the row kernels read them).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk<E>(
    w: &CpuWeight,
    rows: Range<usize>,
    t: usize,
    per_token: usize,
    acts: &[E],
    four: fn(&[u8], &[&[E]; TOKENS]) -> [f32; TOKENS],
    one: fn(&[u8], &[&[E]; 1]) -> [f32; 1],
    dst: &Dst,
) {
    let act = |token: usize| &acts[token * per_token..(token + 1) * per_token];
    let quad = t / TOKENS * TOKENS;
    for block in rows.clone().step_by(BLOCK_ROWS) {
        let block_end = (block + BLOCK_ROWS).min(rows.end);
        for t0 in (0..quad).step_by(TOKENS) {
            let four_acts = [act(t0), act(t0 + 1), act(t0 + 2), act(t0 + 3)];
            for r in block..block_end {
                for (j, v) in four(w.row(r), &four_acts).into_iter().enumerate() {
                    dst.put(t0 + j, r, v);
                }
            }
        }
        for t1 in quad..t {
            for r in block..block_end {
                dst.put(t1, r, one(w.row(r), &[act(t1)])[0]);
            }
        }
    }
}
