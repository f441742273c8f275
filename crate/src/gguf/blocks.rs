//! ggml tensor types and their block layouts, with CPU dequantization.
//!
//! Layouts follow ggml (`ggml-common.h`): a block of `block_len` weights is stored in
//! `block_bytes` bytes, little-endian.

use half::{bf16, f16};

/// Weights per K-quant super-block (ggml's QK_K).
pub const QK_K: usize = 256;

/// The ggml tensor types radixlm can read, plus the ids of the others so errors can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's own names
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl GgmlType {
    /// Maps a ggml type id; `Err` carries a readable name for types radixlm does not support.
    pub fn from_id(id: u32) -> Result<Self, String> {
        Ok(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            30 => Self::BF16,
            other => return Err(unsupported_type_name(other)),
        })
    }

    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::BF16 => 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::BF16 => "BF16",
        }
    }

    /// Weights per block.
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q4_K | Self::Q5_K | Self::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18, // f16 d, 16 bytes of nibbles
            Self::Q4_1 => 20, // f16 d, f16 m, 16 bytes of nibbles
            Self::Q5_0 => 22, // f16 d, u32 of fifth bits, 16 bytes of nibbles
            Self::Q5_1 => 24, // f16 d, f16 m, u32 of fifth bits, 16 bytes of nibbles
            Self::Q8_0 => 34, // f16 d, 32 i8
            Self::Q4_K => 144, // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
            Self::Q5_K => 176, // as Q4_K, with 32 bytes of fifth bits before the nibbles
            Self::Q6_K => 210, // 128 bytes of low nibbles, 64 of high bit pairs, 16 i8 scales, f16 d
        }
    }

    /// Bytes taken by a row of `n` weights, or `None` if `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_len()) {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }
}

fn unsupported_type_name(id: u32) -> String {
    let name = match id {
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return format!("unknown ggml type id {id}"),
    };
    format!("{name} (ggml type id {id})")
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K super-block from its 12 bytes of
/// 6-bit fields (ggml's `get_scale_min_k4`): sub-blocks 0-3 keep theirs in the low six bits of
/// bytes j and j + 4; 4-7 in the nibbles of byte j + 4 with the top two bits in the spare high
/// bits of bytes j - 4 and j.
pub fn k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}

/// Dequantizes `data` (whole blocks of `ty`) into `out`, which must hold exactly the weights.
/// The arithmetic is ggml's, in its order (scales times scales first), so results are exact.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) {
    let bl = ty.block_len();
    let bb = ty.block_bytes();
    assert_eq!(data.len() / bb * bl, out.len(), "dequantize: size mismatch");
    let blocks = out.chunks_exact_mut(bl).zip(data.chunks_exact(bb));
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in blocks {
                let d = f16_at(b, 0);
                for j in 0..16 {
                    o[j] = ((b[2 + j] & 0x0f) as f32 - 8.0) * d;
                    o[j + 16] = ((b[2 + j] >> 4) as f32 - 8.0) * d;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in blocks {
                let d = f16_at(b, 0);
                let m = f16_at(b, 2);
                for j in 0..16 {
                    o[j] = (b[4 + j] & 0x0f) as f32 * d + m;
                    o[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
                }
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            // Bit j of qh is weight j's fifth bit (weights 16.. in the high nibbles, bits 16..).
            let q5_1 = ty == GgmlType::Q5_1;
            let qs = if q5_1 { 8 } else { 6 };
            for (o, b) in blocks {
                let d = f16_at(b, 0);
                let qh = u32_at(b, qs - 4);
                let q = |j: usize| {
                    let nibble = if j < 16 { b[qs + j] & 0x0f } else { b[qs + j - 16] >> 4 };
                    (nibble as u32 | ((qh >> j) & 1) << 4) as f32
                };
                for (j, o) in o.iter_mut().enumerate() {
                    *o = if q5_1 { q(j) * d + f16_at(b, 2) } else { (q(j) - 16.0) * d };
                }
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in blocks {
                let d = f16_at(b, 0);
                for j in 0..32 {
                    o[j] = (b[2 + j] as i8) as f32 * d;
                }
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            // Four groups of 64 weights; group g's 32 bytes of nibbles hold sub-block 2g in their
            // low halves and 2g + 1 in their high halves. Q5_K's fifth bit of weight 32s + l is
            // bit s of qh[l].
            let q5 = ty == GgmlType::Q5_K;
            let qs = if q5 { 48 } else { 16 };
            for (o, b) in blocks {
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                for (s, o) in o.chunks_exact_mut(32).enumerate() {
                    let (sc, m) = k_scale_min(&b[4..16], s);
                    let (scale, min) = (d * sc as f32, dmin * m as f32);
                    for (l, o) in o.iter_mut().enumerate() {
                        let byte = b[qs + s / 2 * 32 + l];
                        let mut q = if s % 2 == 0 { byte & 0x0f } else { byte >> 4 };
                        if q5 {
                            q |= ((b[16 + l] >> s) & 1) << 4;
                        }
                        *o = scale * q as f32 - min;
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            // Two halves of 128 weights; in half h, weight 32i + l (i < 4) takes the low (i < 2)
            // or high nibble of ql[64h + 32(i % 2) + l], bits 2i.. of qh[32h + l], and the i8
            // scale of its 16 weights.
            for (o, b) in blocks {
                let d = f16_at(b, 208);
                for (j, o) in o.iter_mut().enumerate() {
                    let (h, i, l) = (j / 128, j % 128 / 32, j % 32);
                    let ql = b[64 * h + 32 * (i % 2) + l];
                    let low = if i < 2 { ql & 0x0f } else { ql >> 4 };
                    let high = (b[128 + 32 * h + l] >> (2 * i)) & 3;
                    let scale = b[192 + j / 16] as i8;
                    *o = (d * scale as f32) * ((low | high << 4) as i32 - 32) as f32;
                }
            }
        }
    }
}

/// Quantizes `x` (a whole number of blocks) into `ty`'s block format. The 32-weight formats
/// round as ggml's reference quantizers do; the K-quants use plain min/max scales where ggml
/// searches for the scales of least error (any valid block is read the same way). Used to write
/// synthetic test models.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let bl = ty.block_len();
    assert_eq!(x.len() % bl, 0, "quantize: not a whole number of blocks");
    let mut out = Vec::with_capacity(x.len() / bl * ty.block_bytes());
    let blocks = x.chunks_exact(bl);
    match ty {
        GgmlType::F32 => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q4_0 | GgmlType::Q5_0 => {
            // ggml: the value of largest magnitude maps to the lowest code, -8 or -16.
            let half = if ty == GgmlType::Q4_0 { 8.0 } else { 16.0 };
            for b in blocks {
                let max = b.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
                let d = max / -half;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let codes: Vec<u8> = b.iter().map(|v| ((v * id + half + 0.5) as i32).clamp(0, 2 * half as i32 - 1) as u8).collect();
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                push_nibbles(&mut out, &codes, ty == GgmlType::Q5_0);
            }
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let levels = if ty == GgmlType::Q4_1 { 15.0 } else { 31.0 };
            for b in blocks {
                let min = b.iter().copied().fold(f32::INFINITY, f32::min);
                let max = b.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let d = (max - min) / levels;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let codes: Vec<u8> = b.iter().map(|v| (((v - min) * id + 0.5) as i32).clamp(0, levels as i32) as u8).collect();
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                push_nibbles(&mut out, &codes, ty == GgmlType::Q5_1);
            }
        }
        GgmlType::Q8_0 => {
            for b in blocks {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend(b.iter().map(|v| ((v * id).round() as i32).clamp(-128, 127) as i8 as u8));
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => blocks.for_each(|b| quantize_q4_k_q5_k(b, ty == GgmlType::Q5_K, &mut out)),
        GgmlType::Q6_K => blocks.for_each(|b| quantize_q6_k(b, &mut out)),
    }
    out
}

/// The 32 codes of a Q4/Q5 block: fifth bits (with `fifth`) as a u32, then code j's low four
/// bits in byte j % 16 (low nibble for j < 16).
fn push_nibbles(out: &mut Vec<u8>, codes: &[u8], fifth: bool) {
    if fifth {
        let qh = codes.iter().enumerate().fold(0u32, |qh, (j, &c)| qh | (((c >> 4) & 1) as u32) << j);
        out.extend_from_slice(&qh.to_le_bytes());
    }
    out.extend((0..16).map(|j| (codes[j] & 0x0f) | (codes[j + 16] & 0x0f) << 4));
}

fn nearest(v: f32) -> i32 {
    v.round() as i32
}

/// One Q4_K (or Q5_K) super-block: each 32-weight sub-block gets scale (max - min) / levels and
/// min -min(min, 0), both stored as 6-bit multiples of the super-block's d and dmin.
fn quantize_q4_k_q5_k(x: &[f32], q5: bool, out: &mut Vec<u8>) {
    let levels = if q5 { 31.0 } else { 15.0 };
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for (s, sub) in x.chunks_exact(32).enumerate() {
        let min = sub.iter().copied().fold(f32::INFINITY, f32::min).min(0.0);
        let max = sub.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        scales[s] = (max - min) / levels;
        mins[s] = -min;
    }
    let max_scale = scales.iter().copied().fold(0f32, f32::max);
    let max_min = mins.iter().copied().fold(0f32, f32::max);
    let six_bits = |v: f32, max: f32| if max > 0.0 { nearest(v * 63.0 / max).clamp(0, 63) as u8 } else { 0 };
    let ls: Vec<u8> = scales.iter().map(|&v| six_bits(v, max_scale)).collect();
    let lm: Vec<u8> = mins.iter().map(|&v| six_bits(v, max_min)).collect();
    let mut packed = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            packed[j] = ls[j];
            packed[j + 4] = lm[j];
        } else {
            packed[j + 4] = (ls[j] & 0x0f) | (lm[j] & 0x0f) << 4;
            packed[j - 4] |= (ls[j] >> 4) << 6;
            packed[j] |= (lm[j] >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    // Codes against the scales as stored, so rounding sees what dequantization will use.
    let mut codes = [0u8; QK_K];
    for (s, sub) in x.chunks_exact(32).enumerate() {
        let (sc, m) = k_scale_min(&packed, s);
        let scale = d.to_f32() * sc as f32;
        let min = dmin.to_f32() * m as f32;
        if scale == 0.0 {
            continue;
        }
        for (l, &v) in sub.iter().enumerate() {
            codes[32 * s + l] = nearest((v + min) / scale).clamp(0, levels as i32) as u8;
        }
    }
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&dmin.to_le_bytes());
    out.extend_from_slice(&packed);
    if q5 {
        out.extend((0..32).map(|l| (0..8).fold(0u8, |qh, s| qh | ((codes[32 * s + l] >> 4) & 1) << s)));
    }
    for g in 0..4 {
        out.extend((0..32).map(|l| (codes[64 * g + l] & 0x0f) | (codes[64 * g + 32 + l] & 0x0f) << 4));
    }
}

/// One Q6_K super-block: each 16-weight sub-block's value of largest magnitude maps to code
/// -32; those scales are stored as i8 multiples of d, the largest as -128 (ggml's layout).
fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut scales = [0f32; 16];
    for (s, sub) in x.chunks_exact(16).enumerate() {
        let max = sub.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        scales[s] = max / -32.0;
    }
    let max_scale = scales.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let iscale = if max_scale != 0.0 { -128.0 / max_scale } else { 0.0 };
    let sc: Vec<i8> = scales.iter().map(|&v| nearest(iscale * v).clamp(-128, 127) as i8).collect();
    let d = f16::from_f32(if iscale != 0.0 { 1.0 / iscale } else { 0.0 });
    let mut codes = [32u8; QK_K];
    for (s, sub) in x.chunks_exact(16).enumerate() {
        let scale = d.to_f32() * sc[s] as f32;
        if scale == 0.0 {
            continue;
        }
        for (l, &v) in sub.iter().enumerate() {
            codes[16 * s + l] = (nearest(v / scale).clamp(-32, 31) + 32) as u8;
        }
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for h in 0..2 {
        for l in 0..32 {
            let c = |i: usize| codes[128 * h + 32 * i + l];
            ql[64 * h + l] = (c(0) & 0x0f) | (c(2) & 0x0f) << 4;
            ql[64 * h + 32 + l] = (c(1) & 0x0f) | (c(3) & 0x0f) << 4;
            qh[32 * h + l] = (c(0) >> 4) | (c(1) >> 4) << 2 | (c(2) >> 4) << 4 | (c(3) >> 4) << 6;
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&v| v as u8));
    out.extend_from_slice(&d.to_le_bytes());
}
