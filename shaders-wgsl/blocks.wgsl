// GGUF block formats read in place (gguf/blocks.rs holds the CPU twin). A kernel that includes
// this file binds its weights as array<u32> and defines `fn weight_word(i: u32) -> u32`; each
// reader takes the ggml type id `ty`, which kernels pass as a pipeline constant so that the
// compiler keeps only that type's case (or, over a weight of two types, the row's). Blocks are 18 to 210 bytes, many not a multiple of 4, so
// values are read at any byte offset by joining two words.

const TYPE_F32: u32 = 0u;
const TYPE_F16: u32 = 1u;
const TYPE_Q4_0: u32 = 2u;  // f16 d, 16 bytes of nibbles: w = (q - 8) * d
const TYPE_Q4_1: u32 = 3u;  // f16 d, f16 m, 16 bytes of nibbles: w = q * d + m
const TYPE_Q5_0: u32 = 6u;  // f16 d, u32 fifth bits, 16 bytes of nibbles: w = (q - 16) * d
const TYPE_Q5_1: u32 = 7u;  // f16 d, f16 m, u32 fifth bits, 16 bytes of nibbles: w = q * d + m
const TYPE_Q8_0: u32 = 8u;  // f16 d, 32 i8: w = q * d
const TYPE_Q4_K: u32 = 12u; // 256: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 of nibbles
const TYPE_Q5_K: u32 = 13u; // 256: as Q4_K with 32 bytes of fifth bits before the nibbles
const TYPE_Q6_K: u32 = 14u; // 256: 128 bytes of low nibbles, 64 of bit pairs, 16 i8 scales, f16 d
const TYPE_BF16: u32 = 30u; // the high half of an f32

// Bytes of one row of `k` weights of type `ty` (k a whole number of blocks).
fn row_bytes(ty: u32, k: u32) -> u32 {
    switch ty {
        case TYPE_F32: { return k * 4u; }
        case TYPE_F16: { return k * 2u; }
        case TYPE_Q4_0: { return k / 32u * 18u; }
        case TYPE_Q4_1: { return k / 32u * 20u; }
        case TYPE_Q5_0: { return k / 32u * 22u; }
        case TYPE_Q5_1: { return k / 32u * 24u; }
        case TYPE_Q4_K: { return k / 256u * 144u; }
        case TYPE_Q5_K: { return k / 256u * 176u; }
        case TYPE_Q6_K: { return k / 256u * 210u; }
        case TYPE_BF16: { return k * 2u; }
        case TYPE_Q8_0, default: { return k / 32u * 34u; }
    }
}

// The 4 bytes at byte offset `b` of the weights, little-endian.
fn weight_u32_at(b: u32) -> u32 {
    let i = b >> 2u;
    let s = (b & 3u) * 8u;
    let lo = weight_word(i);
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (weight_word(i + 1u) << (32u - s));
}

fn f16_at(b: u32) -> f32 {
    return unpack2x16float(weight_u32_at(b)).x;
}

fn byte_at(b: u32) -> u32 {
    return (weight_word(b >> 2u) >> ((b & 3u) * 8u)) & 0xffu;
}

// The four bytes of `q` as u32 lanes.
fn bytes4(q: u32) -> vec4<u32> {
    return vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(0xffu);
}

// Bit `s` of each byte of `q`, as 0 or 16 (the fifth bit of 5-bit codes).
fn fifth_bits4(q: u32, s: u32) -> vec4<f32> {
    return vec4<f32>((bytes4(q) >> vec4<u32>(s)) & vec4<u32>(1u)) * 16.0;
}

// Q5_0/Q5_1: the fifth bits of weights j .. j + 3 are bits j .. j + 3 of the block's u32 `qh`.
fn qh_bits4(qh: u32, j: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(qh) >> (vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u)) * 16.0;
}

// Q4_K/Q5_K: (scale, min) of sub-block s (0..8) from the 12 bytes at `at` (gguf/blocks.rs
// `k_scale_min`, ggml's get_scale_min_k4).
fn k_scale_min(at: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(byte_at(at + s) & 63u), f32(byte_at(at + s + 4u) & 63u));
    }
    let b = byte_at(at + s + 4u);
    return vec2<f32>(f32((b & 0xfu) | ((byte_at(at + s - 4u) >> 6u) << 4u)), f32((b >> 4u) | ((byte_at(at + s) >> 6u) << 4u)));
}

// Sign-extends the 4 bytes of `q` to i32 lanes.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u), bitcast<i32>(q << 8u), bitcast<i32>(q)) >> vec4<u32>(24u));
}

// Nibbles of bytes 0..3 of `q` (low halves if `high` is false).
fn nibbles4(q: u32, high: bool) -> vec4<f32> {
    let s = select(0u, 4u, high);
    return vec4<f32>((vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) >> vec4<u32>(s)) & vec4<u32>(0xfu));
}

// Weights k..k+3 of the row of type `ty` starting at byte `row`; k % 4 == 0 and k + 4 <= row
// length. In a 32-block, byte j (j < 16) holds weight j (low nibble) and weight j + 16 (high nibble).
fn weights4(ty: u32, row: u32, k: u32) -> vec4<f32> {
    let j = k % 32u;
    switch ty {
        case TYPE_F32: {
            let i = row / 4u + k;
            return bitcast<vec4<f32>>(vec4<u32>(weight_word(i), weight_word(i + 1u), weight_word(i + 2u), weight_word(i + 3u)));
        }
        case TYPE_F16: {
            let b = row + k * 2u;
            return vec4<f32>(unpack2x16float(weight_u32_at(b)), unpack2x16float(weight_u32_at(b + 4u)));
        }
        case TYPE_Q4_0: {
            let blk = row + k / 32u * 18u;
            return (nibbles4(weight_u32_at(blk + 2u + j % 16u), j >= 16u) - 8.0) * f16_at(blk);
        }
        case TYPE_Q4_1: {
            let blk = row + k / 32u * 20u;
            let dm = unpack2x16float(weight_u32_at(blk));
            return nibbles4(weight_u32_at(blk + 4u + j % 16u), j >= 16u) * dm.x + dm.y;
        }
        case TYPE_Q5_0: {
            let blk = row + k / 32u * 22u;
            let q = nibbles4(weight_u32_at(blk + 6u + j % 16u), j >= 16u) + qh_bits4(weight_u32_at(blk + 2u), j);
            return (q - 16.0) * f16_at(blk);
        }
        case TYPE_Q5_1: {
            let blk = row + k / 32u * 24u;
            let dm = unpack2x16float(weight_u32_at(blk));
            let q = nibbles4(weight_u32_at(blk + 8u + j % 16u), j >= 16u) + qh_bits4(weight_u32_at(blk + 4u), j);
            return q * dm.x + dm.y;
        }
        case TYPE_Q4_K, TYPE_Q5_K: {
            // Sub-block s = j / 32 of 32 weights: group s / 2's 32 bytes of nibbles hold it in
            // their low (s even) or high halves; Q5_K's fifth bit of weight 32s + l is bit s of
            // byte l of qh.
            let q5 = ty == TYPE_Q5_K;
            let blk = row + k / 256u * select(144u, 176u, q5);
            let j = k % 256u;
            let s = j / 32u;
            let l = j % 32u;
            let dm = unpack2x16float(weight_u32_at(blk));
            let sm = k_scale_min(blk + 4u, s);
            var q = nibbles4(weight_u32_at(blk + select(16u, 48u, q5) + s / 2u * 32u + l), s % 2u == 1u);
            if (q5) {
                q += fifth_bits4(weight_u32_at(blk + 16u + l), s);
            }
            return (dm.x * sm.x) * q - dm.y * sm.y;
        }
        case TYPE_Q6_K: {
            // Half h = j / 128; in it weight 32i + l takes the low (i < 2) or high nibble of
            // ql[64h + 32(i % 2) + l], bits 2i, 2i + 1 of qh[32h + l], and scale j / 16.
            let blk = row + k / 256u * 210u;
            let j = k % 256u;
            let h = j / 128u;
            let i = j % 128u / 32u;
            let l = j % 32u;
            let low = nibbles4(weight_u32_at(blk + 64u * h + 32u * (i % 2u) + l), i >= 2u);
            let high = vec4<f32>((bytes4(weight_u32_at(blk + 128u + 32u * h + l)) >> vec4<u32>(2u * i)) & vec4<u32>(3u));
            let scale = f32(bitcast<i32>(byte_at(blk + 192u + j / 16u) << 24u) >> 24u);
            return (f16_at(blk + 208u) * scale) * (low + high * 16.0 - 32.0);
        }
        case TYPE_BF16: {
            let u = vec2<u32>(weight_u32_at(row + k * 2u), weight_u32_at(row + k * 2u + 4u));
            return bitcast<vec4<f32>>(vec4<u32>(u.x << 16u, u.x & 0xffff0000u, u.y << 16u, u.y & 0xffff0000u));
        }
        case TYPE_Q8_0, default: {
            let blk = row + k / 32u * 34u;
            return i8x4(weight_u32_at(blk + 2u + j)) * f16_at(blk);
        }
    }
}

// Weight k of the row of type `ty` starting at byte `row`.
fn weight1(ty: u32, row: u32, k: u32) -> f32 {
    switch ty {
        case TYPE_F32: { return bitcast<f32>(weight_word(row / 4u + k)); }
        case TYPE_F16: { return f16_at(row + k * 2u); }
        case TYPE_BF16: { return bitcast<f32>(weight_u32_at(row + k * 2u) << 16u); }
        default: {
            // Blocks are whole groups of four weights.
            return weights4(ty, row, k & ~3u)[k & 3u];
        }
    }
}

// The rows of a weight held by one buffer (gpu/weights.rs `WeightPart`).
struct Part {
    first_row: u32, // first weight row held by this part
    rows: u32,      // rows held by this part
    _pad0: u32,
    _pad1: u32,
}
