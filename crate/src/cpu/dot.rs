//! Dot products of one weight row, as stored in its GGUF block format, with the activations of
//! up to four tokens at once (each weight block is unpacked once and used for every token).
//!
//! Quantized weights meet activations quantized once per token to blocks of 32 16-bit integers
//! ([`Q16Block`]: a scale and the scaled sum, for the formats with a minimum), so the inner loop
//! is integer multiply-adds and one scale per 32 weights, as in llama.cpp's
//! `ggml_vec_dot_*_q8_*`. 16 bits rather than llama.cpp's 8: each block keeps its values to
//! 1/32767 of its largest, where 8 bits cost ~1e-1 relative error in SmolLM2's logits (its
//! activations have outliers); and the product is as cheap, since the widened weights serve
//! every token and 16-bit pairs go straight into i32 multiply-adds. Float weights (F32, F16,
//! BF16) meet the f32 activations.

use half::f16;

use super::math::larger;
use super::simd::Simd;
use crate::gguf::blocks::k_scale_min;
use crate::gguf::GgmlType;

/// 32 activations as `d · qs[j]`; `s = d · Σ qs` serves the weight formats with a minimum.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Q16Block {
    pub qs: [i16; 32],
    pub d: f32,
    pub s: f32,
}

/// Largest code: products with weights of at most 8 bits, summed in pairs, stay inside i32.
const MAX_CODE: f32 = 32767.0;

/// Quantizes `x` (a multiple of 32 values) into `out` (one block per 32), rounding to nearest.
pub fn quantize_q16(x: &[f32], out: &mut [Q16Block]) {
    for (block, o) in x.chunks_exact(32).zip(out) {
        // Compare-and-select and ties-to-even rounding: wasm32 has instructions for these, where
        // `f32::max` and `f32::round` are calls to libm per value.
        let amax = block.iter().fold(0f32, |m, v| larger(v.abs(), m));
        let d = amax / MAX_CODE;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in o.qs.iter_mut().zip(block) {
            let code = (v * id).round_ties_even().clamp(-MAX_CODE, MAX_CODE) as i32;
            sum += code;
            *q = code as i16;
        }
        o.d = d;
        o.s = d * sum as f32;
    }
}

/// Whether `ty`'s rows meet quantized activations (else f32 ones).
pub fn takes_q16(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// One weight row against `N` tokens' activations: `N` dot products.
pub type QuantRowDot<const N: usize> = fn(&[u8], &[&[Q16Block]; N]) -> [f32; N];
/// One float weight row against `N` tokens' f32 activations.
pub type FloatRowDot<const N: usize> = fn(&[u8], &[&[f32]; N]) -> [f32; N];

/// The row kernel for a quantized type.
pub fn quant_kernel<S: Simd, const N: usize>(ty: GgmlType) -> Option<QuantRowDot<N>> {
    Some(match ty {
        GgmlType::Q4_0 => q4_0::<S, N>,
        GgmlType::Q4_1 => q4_1::<S, N>,
        GgmlType::Q5_0 => q5_0::<S, N>,
        GgmlType::Q5_1 => q5_1::<S, N>,
        GgmlType::Q8_0 => q8_0::<S, N>,
        GgmlType::Q4_K => q4_k::<S, N>,
        GgmlType::Q5_K => q5_k::<S, N>,
        GgmlType::Q6_K => q6_k::<S, N>,
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => return None,
    })
}

/// The row kernel for a float type.
pub fn float_kernel<S: Simd, const N: usize>(ty: GgmlType) -> Option<FloatRowDot<N>> {
    Some(match ty {
        GgmlType::F32 => f32_row::<S, N>,
        GgmlType::F16 => f16_row::<S, N>,
        GgmlType::BF16 => bf16_row::<S, N>,
        _ => return None,
    })
}

#[inline(always)]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

#[inline(always)]
fn arr16(b: &[u8]) -> &[u8; 16] {
    b[..16].try_into().unwrap_or(&[0; 16])
}

#[inline(always)]
fn arr32(b: &[u8]) -> &[u8; 32] {
    b[..32].try_into().unwrap_or(&[0; 32])
}

/// Accumulators of `N` tokens: vector sums of the scaled block dots, and the scalar sums of
/// the minimum terms.
struct Acc<S: Simd, const N: usize> {
    v: [S::F; N],
    m: [f32; N],
}

impl<S: Simd, const N: usize> Acc<S, N> {
    #[inline(always)]
    fn new() -> Self {
        Self { v: [S::zero(); N], m: [0.0; N] }
    }

    /// Adds block `b` of every token: `d_w · d_a · (w · a)`, and `m_w · s_a` where the weights
    /// have a minimum.
    #[inline(always)]
    fn block(&mut self, acts: &[&[Q16Block]; N], b: usize, w: S::B, d: f32, m: Option<f32>) {
        let w = S::widen(w);
        for t in 0..N {
            let a = &acts[t][b];
            self.v[t] = S::fma(self.v[t], S::dot(w, &a.qs), d * a.d);
            if let Some(m) = m {
                self.m[t] += m * a.s;
            }
        }
    }

    #[inline(always)]
    fn finish(self) -> [f32; N] {
        std::array::from_fn(|t| S::sum(self.v[t]) + self.m[t])
    }
}

#[inline(always)]
fn q4_0<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut acc = Acc::<S, N>::new();
    for (b, blk) in row.chunks_exact(18).enumerate() {
        let w = S::sub(S::nibbles(arr16(&blk[2..])), 8);
        acc.block(acts, b, w, f16_at(blk, 0), None);
    }
    acc.finish()
}

#[inline(always)]
fn q4_1<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut acc = Acc::<S, N>::new();
    for (b, blk) in row.chunks_exact(20).enumerate() {
        let w = S::nibbles(arr16(&blk[4..]));
        acc.block(acts, b, w, f16_at(blk, 0), Some(f16_at(blk, 2)));
    }
    acc.finish()
}

/// A Q5 block's codes: the nibbles with bit j of `qh` as weight j's fifth bit.
#[inline(always)]
fn q5_codes<S: Simd>(qs: &[u8], qh: u32) -> S::B {
    S::or(S::nibbles(arr16(qs)), S::and(S::bit_mask(qh), 0x10))
}

#[inline(always)]
fn q5_0<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut acc = Acc::<S, N>::new();
    for (b, blk) in row.chunks_exact(22).enumerate() {
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let w = S::sub(q5_codes::<S>(&blk[6..], qh), 16);
        acc.block(acts, b, w, f16_at(blk, 0), None);
    }
    acc.finish()
}

#[inline(always)]
fn q5_1<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut acc = Acc::<S, N>::new();
    for (b, blk) in row.chunks_exact(24).enumerate() {
        let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
        let w = q5_codes::<S>(&blk[8..], qh);
        acc.block(acts, b, w, f16_at(blk, 0), Some(f16_at(blk, 2)));
    }
    acc.finish()
}

#[inline(always)]
fn q8_0<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut acc = Acc::<S, N>::new();
    for (b, blk) in row.chunks_exact(34).enumerate() {
        acc.block(acts, b, S::load(arr32(&blk[2..])), f16_at(blk, 0), None);
    }
    acc.finish()
}

/// Q4_K and Q5_K: super-blocks of 256 in 8 sub-blocks of 32 with 6-bit scales and minimums;
/// pair p of sub-blocks shares 32 bytes of nibbles (2p low, 2p + 1 high). Q5_K's fifth bit of
/// weight 32s + l is bit s of qh[l].
#[inline(always)]
fn k_quant<S: Simd, const N: usize, const Q5: bool>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut acc = Acc::<S, N>::new();
    let (bytes, qs_at) = if Q5 { (176, 48) } else { (144, 16) };
    for (sb, blk) in row.chunks_exact(bytes).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let qh = if Q5 { Some(S::load(arr32(&blk[16..]))) } else { None };
        for pair in 0..4 {
            let q = S::load(arr32(&blk[qs_at + 32 * pair..]));
            for (half, codes) in [S::and(q, 0x0f), S::shr(q, 4)].into_iter().enumerate() {
                let s = 2 * pair + half;
                let codes = match qh {
                    Some(qh) => S::or(codes, S::shl(S::and(S::shr(qh, s as u32), 1), 4)),
                    None => codes,
                };
                let (sc, m) = k_scale_min(&blk[4..16], s);
                acc.block(acts, sb * 8 + s, codes, d * sc as f32, Some(-dmin * m as f32));
            }
        }
    }
    acc.finish()
}

#[inline(always)]
fn q4_k<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    k_quant::<S, N, false>(row, acts)
}

#[inline(always)]
fn q5_k<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    k_quant::<S, N, true>(row, acts)
}

/// Q6_K: super-blocks of 256 in two halves of 128; in half h, weights 32i + l take the low
/// (i < 2) or high nibble of ql[64h + 32(i % 2) + l] and bits 2i.. of qh[32h + l], minus 32,
/// with an i8 scale per 16 weights.
#[inline(always)]
fn q6_k<S: Simd, const N: usize>(row: &[u8], acts: &[&[Q16Block]; N]) -> [f32; N] {
    let mut v = [S::zero(); N];
    for (sb, blk) in row.chunks_exact(210).enumerate() {
        let d = f16_at(blk, 208);
        let scales = &blk[192..208];
        for h in 0..2 {
            let ql0 = S::load(arr32(&blk[64 * h..]));
            let ql1 = S::load(arr32(&blk[64 * h + 32..]));
            let qh = S::load(arr32(&blk[128 + 32 * h..]));
            let low = [S::and(ql0, 0x0f), S::and(ql1, 0x0f), S::shr(ql0, 4), S::shr(ql1, 4)];
            for (i, low) in low.into_iter().enumerate() {
                let high = S::shl(S::and(S::shr(qh, 2 * i as u32), 3), 4);
                let w = S::widen(S::sub(S::or(low, high), 32));
                let sc = 8 * h + 2 * i;
                let (s0, s1) = (d * scales[sc] as i8 as f32, d * scales[sc + 1] as i8 as f32);
                let b = sb * 8 + 4 * h + i;
                for t in 0..N {
                    let a = &acts[t][b];
                    v[t] = S::fma2(v[t], S::dot(w, &a.qs), s0 * a.d, s1 * a.d);
                }
            }
        }
    }
    std::array::from_fn(|t| S::sum(v[t]))
}

/// Float rows: 8 weights converted to f32 at a time by `widen`, then multiplied with each
/// token's activations.
#[inline(always)]
fn float_row<S: Simd, const N: usize, const BYTES: usize>(row: &[u8], xs: &[&[f32]; N], widen: impl Fn(&[u8], &mut [f32; 8])) -> [f32; N] {
    let mut v = [S::zero(); N];
    let mut w = [0f32; 8];
    let k = row.len() / BYTES;
    let whole = k / 8 * 8;
    for j in (0..whole).step_by(8) {
        widen(&row[j * BYTES..(j + 8) * BYTES], &mut w);
        for t in 0..N {
            let x: &[f32; 8] = xs[t][j..j + 8].try_into().unwrap_or(&[0.0; 8]);
            v[t] = S::fmul_add(v[t], &w, x);
        }
    }
    // Rows whose length is no multiple of 8 (float weights may have any length).
    let mut tail = [0f32; N];
    if whole < k {
        let mut rest = [0f32; 8];
        let mut padded = [0u8; 8 * 4];
        padded[..(k - whole) * BYTES].copy_from_slice(&row[whole * BYTES..]);
        widen(&padded[..8 * BYTES], &mut rest);
        for t in 0..N {
            tail[t] = rest[..k - whole].iter().zip(&xs[t][whole..]).map(|(a, b)| a * b).sum();
        }
    }
    std::array::from_fn(|t| S::sum(v[t]) + tail[t])
}

#[inline(always)]
fn f32_row<S: Simd, const N: usize>(row: &[u8], xs: &[&[f32]; N]) -> [f32; N] {
    float_row::<S, N, 4>(row, xs, |b, w| {
        for (w, c) in w.iter_mut().zip(b.chunks_exact(4)) {
            *w = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    })
}

#[inline(always)]
fn f16_row<S: Simd, const N: usize>(row: &[u8], xs: &[&[f32]; N]) -> [f32; N] {
    float_row::<S, N, 2>(row, xs, |b, w| {
        let bits: [u16; 8] = std::array::from_fn(|j| u16::from_le_bytes([b[2 * j], b[2 * j + 1]]));
        S::f16_to_f32(&bits, w);
    })
}

#[inline(always)]
fn bf16_row<S: Simd, const N: usize>(row: &[u8], xs: &[&[f32]; N]) -> [f32; N] {
    float_row::<S, N, 2>(row, xs, |b, w| {
        for (w, c) in w.iter_mut().zip(b.chunks_exact(2)) {
            *w = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
        }
    })
}
