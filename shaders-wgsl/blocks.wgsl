// GGUF block formats read in place (gguf/blocks.rs holds the CPU twin). A kernel that includes
// this file binds its weights as array<u32> and defines `fn weight_word(i: u32) -> u32`, and
// declares `override DTYPE: u32` (the ggml type id). Blocks are 18, 20 or 34 bytes, so values
// are read at any byte offset by joining two words.

const TYPE_F32: u32 = 0u;
const TYPE_F16: u32 = 1u;
const TYPE_Q4_0: u32 = 2u;  // f16 d, 16 bytes of nibbles: w = (q - 8) * d
const TYPE_Q4_1: u32 = 3u;  // f16 d, f16 m, 16 bytes of nibbles: w = q * d + m
const TYPE_Q8_0: u32 = 8u;  // f16 d, 32 i8: w = q * d

// Bytes of one row of `k` weights (k a whole number of blocks).
fn row_bytes(k: u32) -> u32 {
    switch DTYPE {
        case TYPE_F32: { return k * 4u; }
        case TYPE_F16: { return k * 2u; }
        case TYPE_Q4_0: { return k / 32u * 18u; }
        case TYPE_Q4_1: { return k / 32u * 20u; }
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

// Sign-extends the 4 bytes of `q` to i32 lanes.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u), bitcast<i32>(q << 8u), bitcast<i32>(q)) >> vec4<u32>(24u));
}

// Nibbles of bytes 0..3 of `q` (low halves if `high` is false).
fn nibbles4(q: u32, high: bool) -> vec4<f32> {
    let s = select(0u, 4u, high);
    return vec4<f32>((vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) >> vec4<u32>(s)) & vec4<u32>(0xfu));
}

// Weights k..k+3 of the row starting at byte `row`; k % 4 == 0 and k + 4 <= row length.
// In a 32-block, byte j (j < 16) holds weight j (low nibble) and weight j + 16 (high nibble).
fn weights4(row: u32, k: u32) -> vec4<f32> {
    let j = k % 32u;
    switch DTYPE {
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
        case TYPE_Q8_0, default: {
            let blk = row + k / 32u * 34u;
            return i8x4(weight_u32_at(blk + 2u + j)) * f16_at(blk);
        }
    }
}

// Weight k of the row starting at byte `row`.
fn weight1(row: u32, k: u32) -> f32 {
    let j = k % 32u;
    switch DTYPE {
        case TYPE_F32: { return bitcast<f32>(weight_word(row / 4u + k)); }
        case TYPE_F16: { return f16_at(row + k * 2u); }
        case TYPE_Q4_0: {
            let blk = row + k / 32u * 18u;
            return (nibbles4(weight_u32_at(blk + 2u + j % 16u), j >= 16u).x - 8.0) * f16_at(blk);
        }
        case TYPE_Q4_1: {
            let blk = row + k / 32u * 20u;
            let dm = unpack2x16float(weight_u32_at(blk));
            return nibbles4(weight_u32_at(blk + 4u + j % 16u), j >= 16u).x * dm.x + dm.y;
        }
        case TYPE_Q8_0, default: {
            let blk = row + k / 32u * 34u;
            return i8x4(weight_u32_at(blk + 2u + j)).x * f16_at(blk);
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
