//! ggml tensor types and their block layouts, with CPU dequantization.
//!
//! Layouts follow ggml (`ggml-common.h`): a block of `block_len` weights is stored in
//! `block_bytes` bytes, little-endian.

use half::f16;

/// The ggml tensor types radixlm can read, plus the ids of the others so errors can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
}

impl GgmlType {
    /// Maps a ggml type id; `Err` carries a readable name for types radixlm does not support.
    pub fn from_id(id: u32) -> Result<Self, String> {
        Ok(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            8 => Self::Q8_0,
            other => return Err(unsupported_type_name(other)),
        })
    }

    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q8_0 => "Q8_0",
        }
    }

    /// Weights per block.
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q8_0 => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
            Self::Q4_0 => 18, // f16 d, 16 bytes of nibbles
            Self::Q4_1 => 20, // f16 d, f16 m, 16 bytes of nibbles
            Self::Q8_0 => 34, // f16 d, 32 i8
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
        6 => "Q5_0",
        7 => "Q5_1",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
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
        30 => "BF16",
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

/// Dequantizes `data` (whole blocks of `ty`) into `out`, which must hold exactly the weights.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) {
    let bl = ty.block_len();
    let bb = ty.block_bytes();
    assert_eq!(data.len() / bb * bl, out.len(), "dequantize: size mismatch");
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
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(data.chunks_exact(bb)) {
                let d = f16_at(b, 0);
                for j in 0..16 {
                    o[j] = ((b[2 + j] & 0x0f) as f32 - 8.0) * d;
                    o[j + 16] = ((b[2 + j] >> 4) as f32 - 8.0) * d;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(data.chunks_exact(bb)) {
                let d = f16_at(b, 0);
                let m = f16_at(b, 2);
                for j in 0..16 {
                    o[j] = (b[4 + j] & 0x0f) as f32 * d + m;
                    o[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
                }
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(data.chunks_exact(bb)) {
                let d = f16_at(b, 0);
                for j in 0..32 {
                    o[j] = (b[2 + j] as i8) as f32 * d;
                }
            }
        }
    }
}

/// Quantizes `x` (a whole number of blocks) into `ty`'s block format, as ggml's reference
/// quantizers do; used to write synthetic test models.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let bl = ty.block_len();
    assert_eq!(x.len() % bl, 0, "quantize: not a whole number of blocks");
    let mut out = Vec::with_capacity(x.len() / bl * ty.block_bytes());
    match ty {
        GgmlType::F32 => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::Q4_0 => {
            for b in x.chunks_exact(32) {
                // ggml: the value of largest magnitude maps to -8.
                let max = b.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                for j in 0..16 {
                    let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
                    out.push(q(b[j]) | (q(b[j + 16]) << 4));
                }
            }
        }
        GgmlType::Q4_1 => {
            for b in x.chunks_exact(32) {
                let min = b.iter().copied().fold(f32::INFINITY, f32::min);
                let max = b.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let d = (max - min) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                for j in 0..16 {
                    let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
                    out.push(q(b[j]) | (q(b[j + 16]) << 4));
                }
            }
        }
        GgmlType::Q8_0 => {
            for b in x.chunks_exact(32) {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend(b.iter().map(|v| ((v * id).round() as i32).clamp(-128, 127) as i8 as u8));
            }
        }
    }
    out
}
