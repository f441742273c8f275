// One-token decode products specialised per block type (gpu/ops/matmul.rs `BlockLanes`), for
// Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K; matvec_wide serves the other types and steps of
// 2-4 tokens.
//
// A workgroup is MV_WG / BLOCK_LANES groups of BLOCK_LANES lanes; a group computes MV_ROWS weight
// rows. Its lanes split the rows' units (a 32-weight block; 64 weights of a 256-weight block:
// a Q4_K/Q5_K sub-block pair, a Q6_K quarter): lane j takes units j, j + BLOCK_LANES, ..., so adjacent lanes read adjacent
// blocks. Per unit a lane loads the activations once for its four rows and, per row, the block's
// scale once and its quants as whole words. Nibbles are not shifted out: a mask leaves nibble c
// of a word as q·256^c, and the activation it multiplies was pre-scaled by 256^-c (as llama.cpp's
// Metal kernels do), so a weight costs a mask, a conversion and an FMA; offsets and minimums
// multiply the unit's activation sum once. The group's sums (four rows and, with NORM, the sum of
// squares) are added in workgroup memory behind one barrier by the lanes that store them.
//
// Blocks of 18, 22, 34 and 210 bytes start at 2 mod 4 every other block (rows are whole words:
// the host picks this kernel only then): a field at 2 mod 4 is joined from the high half of one
// word and the low half of the next.

override BLOCK_LANES: u32 = 16u; // lanes per group: a power of two from 4 to 256 (gpu/ops/matmul.rs BlockLanes)
override MV_WG: u32 = 64u;       // lanes per workgroup: 64, or BLOCK_LANES when more

const MV_ROWS: u32 = 4u;     // weight rows per group (gpu/ops/matmul.rs MV_ROWS)
const MV_MAX_WG: u32 = 256u;
// Per lane: MV_ROWS sums, then the sum of squares (NORM). 5 KiB.
var<workgroup> mv_sums: array<f32, (MV_ROWS + 1u) * MV_MAX_WG>;

// One token's activations and the norm weights, read four at a time (K is a multiple of 32).
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;      // (1, K / 4)
@group(0) @binding(5) var<storage, read> norm_w: array<vec4<f32>>; // (K / 4) with NORM, else unused

// The low nibble of byte c of a word, in place: q·256^c, read against activations times 256^-c.
const LO_MASK = vec4<u32>(0xfu, 0xf00u, 0xf0000u, 0xf000000u);
const LO_SCALE = vec4<f32>(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 16777216.0);

// The unit's activations (times norm_w with NORM): mv_x[v] holds columns k0 + 4v .. k0 + 4v + 3.
var<private> mv_x: array<vec4<f32>, 16>;
var<private> mv_sum_sq: f32;

/// Activations k .. k + 3, times norm_w with NORM; their squares added to mv_sum_sq.
fn mv_x4(k: u32) -> vec4<f32> {
    let raw = x[k / 4u];
    if (NORM) {
        mv_sum_sq += dot(raw, raw);
        return raw * norm_w[k / 4u];
    }
    return raw;
}

/// Loads the unit's `n` vec4s of activations at column k0 into mv_x, times LO_SCALE for the
/// packed types (all but Q8_0: `ty`), and returns the sums of its two halves (for offsets and
/// minimums).
fn mv_load_x(ty: u32, k0: u32, n: u32) -> vec2<f32> {
    var sums = vec2<f32>();
    for (var v = 0u; v < n; v++) {
        let xv = mv_x4(k0 + 4u * v);
        sums[v / (n / 2u)] += dot(xv, vec4<f32>(1.0));
        mv_x[v] = select(xv * LO_SCALE, xv, ty == TYPE_Q8_0);
    }
    return sums;
}

/// Lanes below 2^31 as f32: a signed conversion, one instruction on every target (an unsigned
/// one is several on x86 without AVX-512, which CPU adapters run).
fn mv_f32(v: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(v));
}

/// Σ q·x over one word of nibbles: its low nibbles against mv_x[lo], its high ones against mv_x[hi].
fn mv_nibbles(q: u32, lo: u32, hi: u32) -> vec2<f32> {
    return vec2<f32>(dot(mv_f32(vec4<u32>(q) & LO_MASK), mv_x[lo]), dot(mv_f32(vec4<u32>(q >> 4u) & LO_MASK), mv_x[hi]));
}

/// The word at byte 2 + 4i of words `lo`, `hi` read at a block start: whole word `hi` when the
/// block starts at 2 mod 4 (`odd`), else the halves of both.
fn mv_join(lo: u32, hi: u32, odd: bool) -> u32 {
    return select((lo >> 16u) | (hi << 16u), hi, odd);
}

/// The f16 scale that starts a block whose first word is `w0`: its high half when the block
/// starts at 2 mod 4 (`odd`).
fn mv_scale(w0: u32, odd: bool) -> f32 {
    return unpack2x16float(select(w0, w0 >> 16u, odd)).x;
}

/// Q4_0 at byte o: d·(Σ q·x - 8·Σx).
fn mv_q4_0(o: u32, xsum: f32) -> f32 {
    let base = o >> 2u;
    let odd = (o & 2u) != 0u;
    var wd: array<u32, 5>;
    for (var i = 0u; i < 5u; i++) {
        wd[i] = w[base + i];
    }
    let d = mv_scale(wd[0], odd);
    var acc = vec2<f32>();
    for (var i = 0u; i < 4u; i++) {
        acc += mv_nibbles(mv_join(wd[i], wd[i + 1u], odd), i, i + 4u);
    }
    return d * (acc.x + acc.y - 8.0 * xsum);
}

/// Q4_1 at byte o (20-byte blocks: always whole words): d·Σ q·x + m·Σx.
fn mv_q4_1(o: u32, xsum: f32) -> f32 {
    let base = o >> 2u;
    let dm = unpack2x16float(w[base]);
    var acc = vec2<f32>();
    for (var i = 0u; i < 4u; i++) {
        acc += mv_nibbles(w[base + 1u + i], i, i + 4u);
    }
    return dm.x * (acc.x + acc.y) + dm.y * xsum;
}

/// Bit c of the four bits of `t` moved to bit 8c + 4: the fifth bits of four weights, in place
/// above their nibbles.
fn mv_fifth_bits(t: u32) -> u32 {
    return ((t & 0xfu) * 0x204081u & 0x01010101u) << 4u;
}

/// Q5_0 at byte o: d·(Σ q·x - 16·Σx), q = nibble + 16·(bit of qh). Both halves of each quant
/// word are read as low nibbles with their fifth bits above them (mv_x all LO_SCALE).
fn mv_q5_0(o: u32, xsum: f32) -> f32 {
    let base = o >> 2u;
    let odd = (o & 2u) != 0u;
    var wd: array<u32, 6>;
    for (var i = 0u; i < 6u; i++) {
        wd[i] = w[base + i];
    }
    let d = mv_scale(wd[0], odd);
    let qh = mv_join(wd[0], wd[1], odd);
    const MASK5 = vec4<u32>(0x1fu, 0x1f00u, 0x1f0000u, 0x1f000000u);
    var acc = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let q = mv_join(wd[i + 1u], wd[i + 2u], odd);
        let lo = (q & 0x0f0f0f0fu) | mv_fifth_bits(qh >> (4u * i));
        let hi = ((q >> 4u) & 0x0f0f0f0fu) | mv_fifth_bits(qh >> (16u + 4u * i));
        acc += dot(mv_f32(vec4<u32>(lo) & MASK5), mv_x[i]) + dot(mv_f32(vec4<u32>(hi) & MASK5), mv_x[i + 4u]);
    }
    return d * (acc - 16.0 * xsum);
}

/// Q8_0 at byte o: d·Σ q·x.
fn mv_q8_0(o: u32) -> f32 {
    let base = o >> 2u;
    let odd = (o & 2u) != 0u;
    var wd: array<u32, 9>;
    for (var i = 0u; i < 9u; i++) {
        wd[i] = w[base + i];
    }
    let d = mv_scale(wd[0], odd);
    var acc = 0.0;
    for (var i = 0u; i < 8u; i++) {
        acc += dot(vec4<f32>(unpack4xI8(mv_join(wd[i], wd[i + 1u], odd))), mv_x[i]);
    }
    return d * acc;
}

/// Q4_K's half g (0..3) of the 144-byte block at byte o: sub-blocks 2g (low nibbles of its 32
/// quant bytes) and 2g + 1 (high nibbles), each d·scale·Σ q·x - dmin·min·Σx.
fn mv_q4_k(o: u32, g: u32, xsum: vec2<f32>) -> f32 {
    let base = o >> 2u;
    let dm = unpack2x16float(w[base]);
    let sm = mv_k_scales(base + 1u, g);
    var acc = vec2<f32>();
    for (var i = 0u; i < 8u; i++) {
        acc += mv_nibbles(w[base + 4u + 8u * g + i], i, i + 8u);
    }
    return dm.x * dot(sm[0], acc) - dm.y * dot(sm[1], xsum);
}

/// The four words at byte a (even) of the weights.
fn mv_words4(a: u32) -> vec4<u32> {
    let base = a >> 2u;
    let lo = vec4<u32>(w[base], w[base + 1u], w[base + 2u], w[base + 3u]);
    let hi = vec4<u32>(lo.yzw, w[base + 4u]);
    return select((lo >> vec4<u32>(16u)) | (hi << vec4<u32>(16u)), lo, (a & 2u) == 0u);
}

/// Fifth bits `fifth` (bit 0 of each byte) above the nibbles `nib`, read as 5-bit lanes against
/// mv_x[v] (LO_SCALE).
fn mv_dot5(nib: u32, fifth: u32, v: u32) -> f32 {
    const MASK5 = vec4<u32>(0x1fu, 0x1f00u, 0x1f0000u, 0x1f000000u);
    return dot(mv_f32(vec4<u32>(nib | ((fifth & 0x01010101u) << 4u)) & MASK5), mv_x[v]);
}

/// Q4_K's and Q5_K's (scale, minimum) pairs of sub-blocks 2g and 2g + 1 from the 12 bytes at
/// word `at` (ggml's get_scale_min_k4), as (scales, minimums): bytes 0-3 of the 12 hold scales
/// 0-3, 4-7 minimums 0-3, and 8-11 the low four bits of scales and minimums 4-7, whose high
/// two bits are those of bytes 0-7.
fn mv_k_scales(at: u32, g: u32) -> mat2x2<f32> {
    let sh = (2u * g & 3u) * 8u;
    let a0 = w[at] >> sh;
    let a1 = w[at + 1u] >> sh;
    let a2 = w[at + 2u] >> sh;
    let high = g >= 2u;
    let sc = select(a0 & 0x3f3fu, (a2 & 0x0f0fu) | ((a0 >> 2u) & 0x3030u), high);
    let mn = select(a1 & 0x3f3fu, ((a2 >> 4u) & 0x0f0fu) | ((a1 >> 2u) & 0x3030u), high);
    return mat2x2<f32>(f32(sc & 0xffu), f32(sc >> 8u), f32(mn & 0xffu), f32(mn >> 8u));
}

/// Q5_K's half g (0..3) of the 176-byte block at byte o: Q4_K's sub-blocks with fifth bits,
/// bit s of qh byte l for weight l of sub-block s (mv_x all LO_SCALE).
fn mv_q5_k(o: u32, g: u32, xsum: vec2<f32>) -> f32 {
    let base = o >> 2u;
    let dm = unpack2x16float(w[base]);
    let sm = mv_k_scales(base + 1u, g);
    var acc = vec2<f32>();
    for (var i = 0u; i < 8u; i++) {
        let q = w[base + 12u + 8u * g + i];
        let qh = w[base + 4u + i] >> (2u * g);
        acc += vec2<f32>(mv_dot5(q & 0x0f0f0f0fu, qh, i), mv_dot5((q >> 4u) & 0x0f0f0f0fu, qh >> 1u, i + 8u));
    }
    return dm.x * dot(sm[0], acc) - dm.y * dot(sm[1], xsum);
}

/// Q6_K's quarter (h, lq) of the 210-byte block at byte o: in half h, weights 32i + 16lq + m
/// (i, segment, 0..3; m 0..15) are ql nibbles (low for i < 2) of bytes 64h + 32(i % 2) + 16lq + m
/// with bits 2i, 2i + 1 of qh byte 32h + 16lq + m above them, minus 32, times d·scales[8h + 2i
/// + lq]. mv_x[4i + m / 4] holds segment i's activations (LO_SCALE), xsum their sums.
fn mv_q6_k(o: u32, h: u32, lq: u32, xsum: vec4<f32>) -> f32 {
    let ql = array<vec4<u32>, 2>(mv_words4(o + 64u * h + 16u * lq), mv_words4(o + 64u * h + 32u + 16u * lq));
    let qh = mv_words4(o + 128u + 32u * h + 16u * lq);
    let sc = mv_words4(o + 192u + 8u * h).xy;
    let d = unpack2x16float(w[(o + 208u) >> 2u] >> ((o + 208u) & 2u) * 8u).x;
    const MASK6 = vec4<u32>(0x3fu, 0x3f00u, 0x3f0000u, 0x3f000000u);
    var acc = vec4<f32>();
    for (var i = 0u; i < 4u; i++) {
        for (var m = 0u; m < 4u; m++) {
            let nib = (ql[i % 2u][m] >> (4u * (i / 2u))) & 0x0f0f0f0fu;
            let q = nib | (((qh[m] >> (2u * i)) & 0x03030303u) << 4u);
            acc[i] += dot(mv_f32(vec4<u32>(q) & MASK6), mv_x[4u * i + m]);
        }
    }
    let s01 = unpack4xI8(sc.x);
    let s23 = unpack4xI8(sc.y);
    let scales = vec4<f32>(vec4<i32>(s01[lq], s01[lq + 2u], s23[lq], s23[lq + 2u]));
    return d * dot(scales, acc - 32.0 * xsum);
}

/// The activation count of one unit of a row of type `ty` (see the top).
fn mv_unit_len(ty: u32) -> u32 {
    return select(32u, 64u, ty == TYPE_Q4_K || ty == TYPE_Q5_K || ty == TYPE_Q6_K);
}

/// Unit u of the four rows of type `ty` starting at bytes `rows`.
fn mv_unit(ty: u32, rows: vec4<u32>, u: u32) -> vec4<f32> {
    var r = vec4<f32>();
    switch ty {
        case TYPE_Q4_K: {
            let xsum = mv_load_x(ty, u * 64u, 16u);
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q4_k(rows[j] + u / 4u * 144u, u % 4u, xsum);
            }
        }
        case TYPE_Q5_K: {
            let xsum = mv_load_x(ty, u * 64u, 16u);
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q5_k(rows[j] + u / 4u * 176u, u % 4u, xsum);
            }
        }
        case TYPE_Q6_K: {
            // Quarter u % 4 of block u / 4: half h = u % 4 / 2, lq = u % 2.
            let h = u % 4u / 2u;
            let lq = u % 2u;
            let k0 = u / 4u * 256u + 128u * h + 16u * lq;
            var xsum = vec4<f32>();
            for (var v = 0u; v < 16u; v++) {
                mv_x[v] = mv_x4(k0 + 32u * (v / 4u) + 4u * (v % 4u));
                xsum[v / 4u] += dot(mv_x[v], vec4<f32>(1.0));
                mv_x[v] *= LO_SCALE;
            }
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q6_k(rows[j] + u / 4u * 210u, h, lq, xsum);
            }
        }
        case TYPE_Q4_0: {
            let xsum = mv_load_x(ty, u * 32u, 8u);
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q4_0(rows[j] + u * 18u, xsum.x + xsum.y);
            }
        }
        case TYPE_Q4_1: {
            let xsum = mv_load_x(ty, u * 32u, 8u);
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q4_1(rows[j] + u * 20u, xsum.x + xsum.y);
            }
        }
        case TYPE_Q5_0: {
            let xsum = mv_load_x(ty, u * 32u, 8u);
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q5_0(rows[j] + u * 22u, xsum.x + xsum.y);
            }
        }
        case TYPE_Q8_0, default: {
            mv_load_x(ty, u * 32u, 8u);
            for (var j = 0u; j < MV_ROWS; j++) {
                r[j] = mv_q8_0(rows[j] + u * 34u);
            }
        }
    }
    return r;
}

/// Group g's total of entry e (row e, or MV_ROWS: the sum of squares).
fn mv_total(e: u32, g: u32) -> f32 {
    var t = 0.0;
    for (var j = 0u; j < BLOCK_LANES; j++) {
        t += mv_sums[e * MV_WG + g * BLOCK_LANES + j];
    }
    return t;
}

@compute @workgroup_size(MV_WG)
fn matvec_blocks(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let per = outputs_per_block(MV_ROWS);
    let first = linear_group(wid, nwg) * (MV_WG / BLOCK_LANES) * per;
    if (first >= output_rows()) {
        return; // the whole workgroup: first is uniform
    }
    let g = lid / BLOCK_LANES;
    let lane = lid % BLOCK_LANES;
    let r0 = first + g * per; // past the end, rows are clamped (weight_row) and nothing is stored
    var rows = vec4<u32>();
    for (var j = 0u; j < MV_ROWS; j++) {
        rows[j] = row_start(weight_row(r0, j, MV_ROWS));
    }
    mv_sum_sq = 0.0;
    // The group's rows are all of one type (HI_ROW is a multiple of 64).
    let ty = row_type(is_hi(weight_row(r0, 0u, MV_ROWS)));
    var acc = vec4<f32>();
    for (var u = lane; u < K / mv_unit_len(ty); u += BLOCK_LANES) {
        acc += mv_unit(ty, rows, u);
    }
    for (var j = 0u; j < MV_ROWS; j++) {
        mv_sums[j * MV_WG + lid] = acc[j];
    }
    mv_sums[MV_ROWS * MV_WG + lid] = mv_sum_sq;
    workgroupBarrier();
    let scale = inv_rms(mv_total(MV_ROWS, g));
    if (ATTN_IN) {
        // Lane p stores rows 2p, 2p + 1: a RoPE pair.
        let j = 2u * lane;
        if (lane < MV_ROWS / 2u && r0 + j < part.rows) {
            store_attention_pair(0u, r0 + j, vec2<f32>(mv_total(j, g), mv_total(j + 1u, g)) * scale);
        }
        return;
    }
    if (lane < per) {
        let sum = mv_total(lane, g) * scale;
        if (GATED && r0 + lane < N) {
            store(0u, r0 + lane, act(sum) * (mv_total(lane + per, g) * scale));
        } else if (!GATED && r0 + lane < part.rows) {
            store(0u, r0 + lane, sum);
        }
    }
}
