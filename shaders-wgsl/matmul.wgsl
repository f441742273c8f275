// y = x · wᵀ (or y += x · wᵀ) for the rows of one weight part, the weights dequantized from
// their GGUF blocks as they are read (matmul_io.wgsl holds the bindings and epilogues). On GPUs
// decode is `matvec_wide` (a token's products in the types matvec_blocks.wgsl has a loop for run
// there instead) and prefill `matmul_tiled` (at the end). On CPU adapters both are `matmul_rows`: each thread computes a
// TOKENS × 8 block of y straight from storage, holding it in registers: decode uses TOKENS = 1,
// prefill TOKENS = 4.

override TOKENS: u32 = 1u;         // matmul_rows: tokens per thread, 1 or 4 (gpu/ops/matmul.rs)

@group(0) @binding(2) var<storage, read> x: array<f32>;       // (T, K)
@group(0) @binding(5) var<storage, read> norm_w: array<f32>;  // (K) with NORM, else unused

// RMSNorm as this product's prologue: rmsnorm(x)·wᵀ = ((x ⊙ norm_w)·wᵀ) / rms(x), so the
// activations are scaled by norm_w as they are read and each output by 1/rms(x) at the end;
// the mean square comes from the same activations (no separate pass, no normalised copy).

/// Four consecutive raw activations starting at `at`.
fn x4_raw(at: u32) -> vec4<f32> {
    return vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
}

/// Activations k .. k + 3 of the row starting at `row`, times norm_w with NORM.
fn x4(row: u32, k: u32) -> vec4<f32> {
    return x4_raw(row + k) * norm4(k);
}

/// Activation k of the row starting at `row`, times norm_w[k] with NORM.
fn x1(row: u32, k: u32) -> f32 {
    if (NORM) {
        return x[row + k] * norm_w[k];
    }
    return x[row + k];
}

const MAX_TOKENS: u32 = 4u;
const WG: u32 = 16u; // gpu/ops/matmul.rs WG

// Thread g of workgroup (wid.x, wid.y) computes y for tokens wid.y·TOKENS .. + TOKENS (TOKENS
// is 1 or 4) and eight weight rows from (wid.x·WG + g)·8 of this part, every value in a named
// vector or matrix. Tokens and rows past the end are clamped to the last one for loading (no
// branches in the inner loops) and never stored. vec4 · mat4x4 with four rows' weights as its
// columns gives those rows' four sums at once.

// Token i's sums: rows 0-3 in ai, rows 4-7 in bi; the sums of squares of its activations in
// sum_sq[i] (for NORM); xrow[i] is the index of its x[t, 0].
var<private> a0: vec4<f32>;
var<private> a1: vec4<f32>;
var<private> a2: vec4<f32>;
var<private> a3: vec4<f32>;
var<private> b0: vec4<f32>;
var<private> b1: vec4<f32>;
var<private> b2: vec4<f32>;
var<private> b3: vec4<f32>;
var<private> sum_sq: vec4<f32>;
var<private> xrow: vec4<u32>;

/// norm_w[k .. k + 4] with NORM, else ones.
fn norm4(k: u32) -> vec4<f32> {
    if (NORM) {
        return vec4<f32>(norm_w[k], norm_w[k + 1u], norm_w[k + 2u], norm_w[k + 3u]);
    }
    return vec4<f32>(1.0);
}

/// Adds columns k .. k + 3 of every token's products: rows 0-3 weighted by `ca`, rows 4-7 by `cb`.
fn accumulate(k: u32, ca: mat4x4<f32>, cb: mat4x4<f32>) {
    let n = norm4(k);
    let x0 = x4_raw(xrow.x + k);
    if (NORM) {
        sum_sq.x += dot(x0, x0);
    }
    a0 += (x0 * n) * ca;
    b0 += (x0 * n) * cb;
    if (TOKENS > 1u) {
        let x1 = x4_raw(xrow.y + k);
        let x2 = x4_raw(xrow.z + k);
        let x3 = x4_raw(xrow.w + k);
        if (NORM) {
            sum_sq += vec4<f32>(0.0, dot(x1, x1), dot(x2, x2), dot(x3, x3));
        }
        a1 += (x1 * n) * ca;
        b1 += (x1 * n) * cb;
        a2 += (x2 * n) * ca;
        b2 += (x2 * n) * cb;
        a3 += (x3 * n) * ca;
        b3 += (x3 * n) * cb;
    }
}

/// Four words of the weights, at word indices `at`.
fn words4(at: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(w[at.x], w[at.y], w[at.z], w[at.w]);
}

/// The low (or high) f16 halves of four words.
fn f16x4(u: vec4<u32>, high: bool) -> vec4<f32> {
    let s = select(0u, 16u, high);
    return vec4<f32>(unpack2x16float(u.x >> s).x, unpack2x16float(u.y >> s).x, unpack2x16float(u.z >> s).x, unpack2x16float(u.w >> s).x);
}

/// Weights k .. k + 3 of four rows of type `ty` (starting at bytes `rows`), one row a column.
fn columns4(ty: u32, rows: vec4<u32>, k: u32) -> mat4x4<f32> {
    return mat4x4<f32>(weights4(ty, rows.x, k), weights4(ty, rows.y, k), weights4(ty, rows.z, k), weights4(ty, rows.w, k));
}

/// Q4_1 weights of four rows, one row a column, from their nibble words `q` (the low or high
/// halves), scales `d` and offsets `m`.
fn q4_1_columns(q: vec4<u32>, d: vec4<f32>, m: vec4<f32>, high: bool) -> mat4x4<f32> {
    return mat4x4<f32>(nibbles4(q.x, high) * d.x + m.x, nibbles4(q.y, high) * d.y + m.y, nibbles4(q.z, high) * d.z + m.z, nibbles4(q.w, high) * d.w + m.w);
}

/// Q4_0 weights of four rows, one row a column, from their nibble words `q` (the low or high
/// halves) and scales `d`.
fn q4_0_columns(q: vec4<u32>, d: vec4<f32>, high: bool) -> mat4x4<f32> {
    return mat4x4<f32>((nibbles4(q.x, high) - 8.0) * d.x, (nibbles4(q.y, high) - 8.0) * d.y, (nibbles4(q.z, high) - 8.0) * d.z, (nibbles4(q.w, high) - 8.0) * d.w);
}

/// Q8_0 weights of four rows, one row a column, from their words of 4 bytes `q` and scales `d`.
fn q8_0_columns(q: vec4<u32>, d: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(i8x4(q.x) * d.x, i8x4(q.y) * d.y, i8x4(q.z) * d.z, i8x4(q.w) * d.w);
}

/// Stores token t's eight sums (GATED: the gate's four in `a`, up's in `b`) from output row r0.
fn store8(t: u32, r0: u32, a: vec4<f32>, b: vec4<f32>, ss: f32) {
    let s = inv_rms(ss);
    if (ATTN_IN) {
        // r0 is a multiple of 8 and part.rows even: both rows of each pair or neither.
        if (r0 < part.rows) { store_attention_pair(t, r0, a.xy * s); }
        if (r0 + 2u < part.rows) { store_attention_pair(t, r0 + 2u, a.zw * s); }
        if (r0 + 4u < part.rows) { store_attention_pair(t, r0 + 4u, b.xy * s); }
        if (r0 + 6u < part.rows) { store_attention_pair(t, r0 + 6u, b.zw * s); }
        return;
    }
    if (GATED) {
        let y4 = act4(a * s) * (b * s);
        for (var j = 0u; j < 4u; j++) {
            if (r0 + j < N) {
                store(t, r0 + j, y4[j]);
            }
        }
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (r0 + j < part.rows) {
            store(t, r0 + j, a[j] * s);
        }
        if (r0 + 4u + j < part.rows) {
            store(t, r0 + 4u + j, b[j] * s);
        }
    }
}

// Why no workgroup-memory tiles: on CPU adapters (llvmpipe, SwiftShader) every storage or
// workgroup load whose address is not a compile-time uniform is a loop over the SIMD lanes, so
// loads, not multiply-adds, set the speed: each activation loaded serves eight rows and each
// weight word TOKENS tokens. Named values rather than arrays: a compiler that does not unroll
// loops (SwiftShader's) keeps an array indexed by a loop counter in memory, read lane by lane.
@compute @workgroup_size(WG)
fn matmul_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t0 = wid.y * TOKENS;
    let r0 = (wid.x * WG + lid) * outputs_per_block(8u); // the first output row
    let nt = params.n_tokens;
    if (t0 >= nt || r0 >= output_rows()) {
        return;
    }
    let hi = is_hi(weight_row(r0, 0u, 8u)); // the type of all eight rows
    let ty = row_type(hi);
    let wa = vec4<u32>(row_start(weight_row(r0, 0u, 8u)), row_start(weight_row(r0, 1u, 8u)), row_start(weight_row(r0, 2u, 8u)), row_start(weight_row(r0, 3u, 8u)));
    let wb = vec4<u32>(row_start(weight_row(r0, 4u, 8u)), row_start(weight_row(r0, 5u, 8u)), row_start(weight_row(r0, 6u, 8u)), row_start(weight_row(r0, 7u, 8u)));
    xrow = min(vec4<u32>(t0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(nt - 1u)) * K;
    var k = 0u;
    // The paths for DTYPE's word-aligned blocks; rows of DTYPE_HI take the one for any type.
    if (DTYPE == TYPE_Q4_1 && !hi) {
        // 20-byte blocks are word-aligned: f16 d, f16 m, then word j holds the nibbles of
        // values j·4 .. j·4 + 3 (low halves) and 16 + j·4 .. (high halves).
        for (; k < K; k += 32u) {
            let ia = wa / 4u + vec4<u32>(k / 32u * 5u);
            let ib = wb / 4u + vec4<u32>(k / 32u * 5u);
            let dma = words4(ia);
            let dmb = words4(ib);
            let da = f16x4(dma, false);
            let ma = f16x4(dma, true);
            let db = f16x4(dmb, false);
            let mb = f16x4(dmb, true);
            for (var g = 0u; g < 4u; g++) {
                let qa = words4(ia + vec4<u32>(1u + g));
                let qb = words4(ib + vec4<u32>(1u + g));
                accumulate(k + g * 4u, q4_1_columns(qa, da, ma, false), q4_1_columns(qb, db, mb, false));
                accumulate(k + g * 4u + 16u, q4_1_columns(qa, da, ma, true), q4_1_columns(qb, db, mb, true));
            }
        }
    } else if ((DTYPE == TYPE_Q8_0 || DTYPE == TYPE_Q4_0) && K % 64u == 0u && !hi) {
        // Rows of whole block pairs start on a word boundary. A Q8_0 pair is 17 words: f16 d0,
        // 32 bytes shifted by 16 bits, f16 d1 (the high half of word 8), 32 aligned bytes. A
        // Q4_0 pair is 9 words laid out the same way with 16 bytes of nibbles per block.
        let q4 = DTYPE == TYPE_Q4_0;
        let pair_words = select(17u, 9u, q4);
        let half = pair_words / 2u; // word holding d1 in its high half
        for (; k < K; k += 64u) {
            let ia = wa / 4u + vec4<u32>(k / 64u * pair_words);
            let ib = wb / 4u + vec4<u32>(k / 64u * pair_words);
            var pa = words4(ia);
            var pb = words4(ib);
            let d0a = f16x4(pa, false);
            let d0b = f16x4(pb, false);
            let d1a = f16x4(words4(ia + vec4<u32>(half)), true);
            let d1b = f16x4(words4(ib + vec4<u32>(half)), true);
            // Q8_0: 8 groups of 4 bytes; Q4_0: 4 words of 2 × 4 nibbles.
            for (var g = 0u; g < half; g++) {
                let na = words4(ia + vec4<u32>(g + 1u));
                let nb = words4(ib + vec4<u32>(g + 1u));
                let q0a = (pa >> vec4<u32>(16u)) | (na << vec4<u32>(16u));
                let q0b = (pb >> vec4<u32>(16u)) | (nb << vec4<u32>(16u));
                let q1a = words4(ia + vec4<u32>(half + 1u + g));
                let q1b = words4(ib + vec4<u32>(half + 1u + g));
                pa = na;
                pb = nb;
                let kg = k + g * 4u;
                if (q4) {
                    accumulate(kg, q4_0_columns(q0a, d0a, false), q4_0_columns(q0b, d0b, false));
                    accumulate(kg + 16u, q4_0_columns(q0a, d0a, true), q4_0_columns(q0b, d0b, true));
                    accumulate(kg + 32u, q4_0_columns(q1a, d1a, false), q4_0_columns(q1b, d1b, false));
                    accumulate(kg + 48u, q4_0_columns(q1a, d1a, true), q4_0_columns(q1b, d1b, true));
                } else {
                    accumulate(kg, q8_0_columns(q0a, d0a), q8_0_columns(q0b, d0b));
                    accumulate(kg + 32u, q8_0_columns(q1a, d1a), q8_0_columns(q1b, d1b));
                }
            }
        }
    } else {
        // Any type and row length, four weights at a time (without HI_ROW a branch on
        // constants: the paths above leave it out of their pipelines).
        for (; k + 4u <= K; k += 4u) {
            accumulate(k, columns4(ty, wa, k), columns4(ty, wb, k));
        }
    }
    if (K % 4u != 0u) {
        // A row length that is not a multiple of 4 (F32 or F16): one column at a time.
        for (; k < K; k++) {
            let ca = vec4<f32>(weight1(ty, wa.x, k), weight1(ty, wa.y, k), weight1(ty, wa.z, k), weight1(ty, wa.w, k));
            let cb = vec4<f32>(weight1(ty, wb.x, k), weight1(ty, wb.y, k), weight1(ty, wb.z, k), weight1(ty, wb.w, k));
            let xs = vec4<f32>(x[xrow.x + k], x[xrow.y + k], x[xrow.z + k], x[xrow.w + k]);
            let v = xs * norm4(k).x;
            if (NORM) {
                sum_sq += xs * xs;
            }
            a0 += v.x * ca;
            b0 += v.x * cb;
            a1 += v.y * ca;
            b1 += v.y * cb;
            a2 += v.z * ca;
            b2 += v.z * cb;
            a3 += v.w * ca;
            b3 += v.w * cb;
        }
    }
    store8(t0, r0, a0, b0, sum_sq.x);
    if (TOKENS > 1u) {
        if (t0 + 1u < nt) { store8(t0 + 1u, r0, a1, b1, sum_sq.y); }
        if (t0 + 2u < nt) { store8(t0 + 2u, r0, a2, b2, sum_sq.z); }
        if (t0 + 3u < nt) { store8(t0 + 3u, r0, a3, b3, sum_sq.w); }
    }
}

const WIDE_WG: u32 = 64u;  // gpu/ops/matmul.rs WIDE_WG
const WIDE_ROWS: u32 = 4u; // gpu/ops/matmul.rs WIDE_ROWS
// Per lane: WIDE_ROWS sums and (with NORM) the sum of squares, for each token. 5 KiB.
const WIDE_SUMS: u32 = MAX_TOKENS * (WIDE_ROWS + 1u);
var<workgroup> lane_sums: array<f32, WIDE_SUMS * WIDE_WG>;

// Decode on GPUs (steps of at most MAX_TOKENS tokens): a workgroup of WIDE_WG lanes computes
// WIDE_ROWS rows for every token of the step. Lane l takes weights 4l .. 4l + 3, then
// 4(l + WIDE_WG) .., so adjacent lanes read adjacent activations (one vec4 each) and adjacent
// words of the same blocks, and each activation serves WIDE_ROWS rows; the lanes' sums are then
// added in a tree in workgroup memory (`matvec_wide`), or by subgroup operations where the
// adapter has them natively (`matvec_subgroup`, matvec_subgroup.wgsl).
@compute @workgroup_size(WIDE_WG)
fn matvec_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = linear_group(wid, nwg) * outputs_per_block(WIDE_ROWS); // the first output row
    if (r0 >= output_rows()) {
        return; // the whole workgroup: r0 is uniform
    }
    let nt = min(params.n_tokens, MAX_TOKENS);
    let sums = wide_lane_sums(r0, nt, lid);
    for (var e = 0u; e < WIDE_SUMS; e++) {
        lane_sums[e * WIDE_WG + lid] = sums[e];
    }
    workgroupBarrier();
    for (var s = WIDE_WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var e = 0u; e < WIDE_SUMS; e++) {
                lane_sums[e * WIDE_WG + lid] += lane_sums[e * WIDE_WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    wide_store(r0, nt, lid);
}

/// One lane's share of a `matvec_wide` workgroup's sums: entry i·WIDE_ROWS + j is token i's row
/// j, entry MAX_TOKENS·WIDE_ROWS + i token i's sum of squares (with NORM).
fn wide_lane_sums(r0: u32, nt: u32, lid: u32) -> array<f32, WIDE_SUMS> {
    let ty = row_type(is_hi(weight_row(r0, 0u, WIDE_ROWS))); // the type of all WIDE_ROWS rows
    var wrow = array<u32, WIDE_ROWS>();
    for (var j = 0u; j < WIDE_ROWS; j++) {
        wrow[j] = row_start(weight_row(r0, j, WIDE_ROWS));
    }
    var acc = array<array<f32, WIDE_ROWS>, MAX_TOKENS>();
    var sum_sq = array<f32, MAX_TOKENS>();
    let k4 = K / 4u * 4u;
    for (var k = lid * 4u; k < k4; k += WIDE_WG * 4u) {
        var xv = array<vec4<f32>, MAX_TOKENS>();
        for (var i = 0u; i < nt; i++) {
            if (NORM) {
                let raw = x4_raw(i * K + k);
                sum_sq[i] += dot(raw, raw);
            }
            xv[i] = x4(i * K, k);
        }
        for (var j = 0u; j < WIDE_ROWS; j++) {
            let wv = weights4(ty, wrow[j], k);
            for (var i = 0u; i < nt; i++) {
                acc[i][j] += dot(xv[i], wv);
            }
        }
    }
    for (var k = k4 + lid; k < K; k += WIDE_WG) {
        for (var i = 0u; i < nt; i++) {
            if (NORM) {
                sum_sq[i] += x[i * K + k] * x[i * K + k];
            }
        }
        for (var j = 0u; j < WIDE_ROWS; j++) {
            let wv = weight1(ty, wrow[j], k);
            for (var i = 0u; i < nt; i++) {
                acc[i][j] += wv * x1(i * K, k);
            }
        }
    }
    var sums = array<f32, WIDE_SUMS>();
    for (var i = 0u; i < MAX_TOKENS; i++) {
        for (var j = 0u; j < WIDE_ROWS; j++) {
            sums[i * WIDE_ROWS + j] = acc[i][j];
        }
        sums[MAX_TOKENS * WIDE_ROWS + i] = sum_sq[i];
    }
    return sums;
}

/// The epilogue of a `matvec_wide` workgroup, once entry e of its sums is in lane_sums[e · WIDE_WG].
fn wide_store(r0: u32, nt: u32, lid: u32) {
    if (ATTN_IN) {
        // Lane l stores token l / 2's rows r0 + 2(l % 2) and the one after (WIDE_ROWS = 4).
        let i = lid / 2u;
        let j = lid % 2u * 2u;
        if (i < nt && r0 + j < part.rows) {
            let scale = inv_rms(lane_sums[(MAX_TOKENS * WIDE_ROWS + i) * WIDE_WG]);
            let pair = vec2<f32>(lane_sums[(i * WIDE_ROWS + j) * WIDE_WG], lane_sums[(i * WIDE_ROWS + j + 1u) * WIDE_WG]);
            store_attention_pair(i, r0 + j, pair * scale);
        }
        return;
    }
    let per = outputs_per_block(WIDE_ROWS);
    if (lid < nt * per) {
        let i = lid / per;
        let j = lid % per;
        let scale = inv_rms(lane_sums[(MAX_TOKENS * WIDE_ROWS + i) * WIDE_WG]);
        let sum = lane_sums[(i * WIDE_ROWS + j) * WIDE_WG] * scale;
        if (GATED && r0 + j < N) {
            store(i, r0 + j, act(sum) * (lane_sums[(i * WIDE_ROWS + j + per) * WIDE_WG] * scale));
        } else if (!GATED && r0 + j < part.rows) {
            store(i, r0 + j, sum);
        }
    }
}

const TILE_WG: u32 = 64u;      // lanes: 8 slot groups × 8 token groups, each 8 × 8
const TILE_ROWS: u32 = 64u;    // weight-row slots per workgroup (gpu/ops/matmul.rs TILE_ROWS)
const TILE_TOKENS: u32 = 64u;  // tokens per workgroup (gpu/ops/matmul.rs TILE_TOKENS)
const TILE_K: u32 = 16u;       // columns per step
const TILE_K4: u32 = TILE_K / 4u + 1u; // a tile row in vec4s, padded to an odd count (see tile_place)
// In f32 5 KiB + 5 KiB + 1 KiB, under WebGPU's 16 KiB of workgroup storage; TileVec is vec4<f32>
// or vec4<f16> (tile_f32.wgsl, tile_f16.wgsl).
var<workgroup> w_tile: array<TileVec, TILE_ROWS * TILE_K4>;   // [place][k / 4] dequantized weights
var<workgroup> x_tile: array<TileVec, TILE_TOKENS * TILE_K4>; // [token][k / 4] activations (times norm_w)
var<workgroup> sq_parts: array<f32, 4u * TILE_WG>;              // each lane's sums of squares of its four tokens

/// The weight row tile slot s of a workgroup starting at output row r0 reads. GATED: slots
/// 4g, 4g + 1 are the gate's rows r0 + 2g, r0 + 2g + 1 and slots 4g + 2, 4g + 3 up's same rows,
/// so each four slots of a lane hold both halves of two outputs.
fn tile_weight_row(r0: u32, s: u32) -> u32 {
    if (GATED) {
        let j = min(r0 + s / 4u * 2u + s % 2u, N - 1u);
        return select(N + j, j, s % 4u < 2u);
    }
    return weight_row(r0, s, TILE_ROWS);
}

/// Weights k .. k + 3 of the row of type `ty` starting at byte `row`, zero past K.
fn tile_weights4(ty: u32, row: u32, k: u32) -> vec4<f32> {
    if (k + 4u <= K) {
        return weights4(ty, row, k);
    }
    var v = vec4<f32>();
    for (var e = 0u; e < 4u && k + e < K; e++) {
        v[e] = weight1(ty, row, k + e);
    }
    return v;
}

/// Weights k .. k + 3 of the four rows of type `ty` starting at bytes `rows`, zero past K.
fn tile_weights(ty: u32, rows: vec4<u32>, k: u32) -> mat4x4<f32> {
    return mat4x4<f32>(tile_weights4(ty, rows.x, k), tile_weights4(ty, rows.y, k), tile_weights4(ty, rows.z, k), tile_weights4(ty, rows.w, k));
}

/// Raw activations k .. k + 3 of the row starting at `row`, zero past K.
fn tile_x4(row: u32, k: u32) -> vec4<f32> {
    if (k + 4u <= K) {
        return x4_raw(row + k);
    }
    var v = vec4<f32>();
    for (var e = 0u; e < 4u && k + e < K; e++) {
        v[e] = x[row + k + e];
    }
    return v;
}

/// Raw activations k .. k + 3 of the four rows starting at `rows`, zero past K.
fn tile_x4x4(rows: vec4<u32>, k: u32) -> mat4x4<f32> {
    return mat4x4<f32>(tile_x4(rows.x, k), tile_x4(rows.y, k), tile_x4(rows.z, k), tile_x4(rows.w, k));
}

/// The sums of squares of the four columns of `x` (four tokens' activations).
fn sq4(x: mat4x4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(x[0], x[0]), dot(x[1], x[1]), dot(x[2], x[2]), dot(x[3], x[3]));
}

/// Lane `lid`'s sums of squares of its four tokens into `sq_parts`, a token's after another's.
fn store_sq_parts(lid: u32, sq: vec4<f32>) {
    sq_parts[lid] = sq.x;
    sq_parts[TILE_WG + lid] = sq.y;
    sq_parts[2u * TILE_WG + lid] = sq.z;
    sq_parts[3u * TILE_WG + lid] = sq.w;
}

/// Where tile token t's parts of its sum of squares begin in `sq_parts`: the lanes of loading row
/// t % 16 loaded it as their token t / 16.
fn tile_sq_at(t: u32) -> u32 {
    return t / 16u * TILE_WG + t % 16u * (TILE_K / 4u);
}

/// A loading token's sum of squares from its parts at `at` in `sq_parts`: the TILE_K / 4 lanes
/// of its column groups hold them side by side.
fn tile_sq(at: u32) -> f32 {
    var v = 0.0;
    for (var g = 0u; g < TILE_K / 4u; g++) {
        v += sq_parts[at + g];
    }
    return v;
}

/// tile_sq of four consecutive loading tokens from `at`.
fn tile_sq4(at: u32) -> vec4<f32> {
    let step = TILE_K / 4u;
    return vec4<f32>(tile_sq(at), tile_sq(at + step), tile_sq(at + 2u * step), tile_sq(at + 3u * step));
}

/// Where slot 8m + j's weights sit in the tile: place 8j + m. The multiplying lane m reads its
/// eight slots 8m .. 8m + 7, so at each read the 8 lanes of a token group (one 128-byte
/// wavefront of vec4 reads) read 8 consecutive places, TILE_K4 (odd) vec4s apart: 8 different
/// bank quads. Slot-major placement put them 8 · TILE_K4 vec4s apart, 0 words mod 32: one bank
/// quad for all 8 lanes.
fn tile_place(slot: u32) -> u32 {
    return slot % 8u * 8u + slot / 8u;
}

/// Slot s's weights at columns 4c .. 4c + 3 of the tile, in f32.
fn tile_w(s: u32, c: u32) -> vec4<f32> {
    return vec4<f32>(w_tile[tile_place(s) * TILE_K4 + c]);
}

/// Token t's activations at columns 4c .. 4c + 3 of the tile, in f32.
fn tile_x(t: u32, c: u32) -> vec4<f32> {
    return vec4<f32>(x_tile[t * TILE_K4 + c]);
}

/// norm4(k), reading no norm weight past K (the activations there are 0).
fn tile_norm4(k: u32) -> vec4<f32> {
    if (k + 4u <= K) {
        return norm4(k);
    }
    var v = vec4<f32>(1.0);
    for (var e = 0u; e < 4u && k + e < K; e++) {
        if (NORM) {
            v[e] = norm_w[k + e];
        }
    }
    return v;
}

/// Stores token t's four sums of a lane's slots, times `scale`, from output row r (GATED: rows r
/// and r + 1, the gate's sums in a.xy and up's in a.zw).
fn store_tile4(t: u32, r: u32, a: vec4<f32>, scale: f32) {
    let v = a * scale;
    if (ATTN_IN) {
        // r is even and part.rows even: both rows of each pair or neither.
        if (r < part.rows) { store_attention_pair(t, r, v.xy); }
        if (r + 2u < part.rows) { store_attention_pair(t, r + 2u, v.zw); }
        return;
    }
    if (GATED) {
        let g = act4(v) * v.zwxy;
        if (r < N) { store(t, r, g.x); }
        if (r + 1u < N) { store(t, r + 1u, g.y); }
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (r + j < part.rows) {
            store(t, r + j, v[j]);
        }
    }
}

/// Stores token t's sums of a lane's eight slots: slots 0-3's from output row out_a, 4-7's
/// from out_b.
fn store_tile8(t: u32, out_a: u32, out_b: u32, a: vec4<f32>, b: vec4<f32>, scale: f32) {
    if (t < params.n_tokens) {
        store_tile4(t, out_a, a, scale);
        store_tile4(t, out_b, b, scale);
    }
}

// Prefill on GPUs: a workgroup of TILE_WG lanes computes TILE_ROWS weight rows for TILE_TOKENS
// tokens. Each step of TILE_K columns, the lanes dequantize the rows' weights and load the
// tokens' activations into workgroup memory together (four adjacent lanes cover a row's 16
// columns: adjacent words of the same blocks), then each lane multiplies 8 of the rows by 8 of
// the tokens from there (16 tile reads per 256 multiply-adds), so every weight read from storage
// serves TILE_TOKENS tokens and every activation TILE_ROWS rows.
@compute @workgroup_size(TILE_WG)
fn matmul_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = wid.x * outputs_per_block(TILE_ROWS); // the first output row
    let t0 = wid.y * TILE_TOKENS;
    let nt = params.n_tokens;
    if (r0 >= output_rows() || t0 >= nt) {
        return; // the whole workgroup: both are uniform
    }
    // Loading: lane l fills column group g of slots s, s + 16, s + 32, s + 48 and of tokens s,
    // s + 16, s + 32, s + 48 (clamped to the last token; only real tokens are stored).
    let g = lid % (TILE_K / 4u);
    let s = lid / (TILE_K / 4u);
    let ty = row_type(is_hi(tile_weight_row(r0, 0u))); // the type of all the tile's rows
    let wrow = vec4<u32>(row_start(tile_weight_row(r0, s)), row_start(tile_weight_row(r0, s + 16u)), row_start(tile_weight_row(r0, s + 32u)), row_start(tile_weight_row(r0, s + 48u)));
    let xrow = min(vec4<u32>(t0 + s) + vec4<u32>(0u, 16u, 32u, 48u), vec4<u32>(nt - 1u)) * K;
    var sq = vec4<f32>();
    // Multiplying: lane l computes slots 8·rg .. 8·rg + 7 for tokens 8·tg .. 8·tg + 7; a_i and
    // b_i are token i's sums of the first and last four slots.
    let rg = lid % 8u;
    let tg = lid / 8u;
    var a0 = vec4<f32>();
    var a1 = vec4<f32>();
    var a2 = vec4<f32>();
    var a3 = vec4<f32>();
    var a4 = vec4<f32>();
    var a5 = vec4<f32>();
    var a6 = vec4<f32>();
    var a7 = vec4<f32>();
    var b0 = vec4<f32>();
    var b1 = vec4<f32>();
    var b2 = vec4<f32>();
    var b3 = vec4<f32>();
    var b4 = vec4<f32>();
    var b5 = vec4<f32>();
    var b6 = vec4<f32>();
    var b7 = vec4<f32>();
    // TILE_PRENORM (f16 tiles): the four tokens' 1 / rms first, from their four lanes' partial
    // sums of squares, so the activations enter the tile normalised.
    var pre = vec4<f32>(1.0);
    if (NORM && TILE_PRENORM) {
        var part = vec4<f32>();
        for (var k0 = 0u; k0 < K; k0 += TILE_K) {
            part += sq4(tile_x4x4(xrow, k0 + g * 4u));
        }
        store_sq_parts(lid, part);
        workgroupBarrier();
        let l = tile_sq_at(s);
        pre = inv_rms4(vec4<f32>(tile_sq(l), tile_sq(TILE_WG + l), tile_sq(2u * TILE_WG + l), tile_sq(3u * TILE_WG + l)));
        workgroupBarrier(); // sq_parts is written again after the loop
    }
    // Double-buffered through registers: a step's weights and activations are read (and the
    // weights dequantized) before the step before it multiplies, so the reads' latency hides
    // behind that step's arithmetic; workgroup memory holds one tile.
    var w_next = tile_weights(ty, wrow, g * 4u);
    var x_next = tile_x4x4(xrow, g * 4u);
    for (var k0 = 0u; k0 < K; k0 += TILE_K) {
        let k = k0 + g * 4u;
        w_tile[tile_place(s) * TILE_K4 + g] = TileVec(w_next[0]);
        w_tile[tile_place(s + 16u) * TILE_K4 + g] = TileVec(w_next[1]);
        w_tile[tile_place(s + 32u) * TILE_K4 + g] = TileVec(w_next[2]);
        w_tile[tile_place(s + 48u) * TILE_K4 + g] = TileVec(w_next[3]);
        if (NORM) {
            sq += sq4(x_next);
        }
        let n = tile_norm4(k);
        x_tile[s * TILE_K4 + g] = TileVec(x_next[0] * n * pre.x);
        x_tile[(s + 16u) * TILE_K4 + g] = TileVec(x_next[1] * n * pre.y);
        x_tile[(s + 32u) * TILE_K4 + g] = TileVec(x_next[2] * n * pre.z);
        x_tile[(s + 48u) * TILE_K4 + g] = TileVec(x_next[3] * n * pre.w);
        workgroupBarrier();
        if (k0 + TILE_K < K) {
            w_next = tile_weights(ty, wrow, k + TILE_K);
            x_next = tile_x4x4(xrow, k + TILE_K);
        }
        let t = 8u * tg;
        let r = 8u * rg;
        // Token groups wholly past the step's tokens skip their products: a short step (a warm
        // turn's few new tokens) leaves whole waves idle rather than multiplying copies.
        for (var c = 0u; c < select(0u, TILE_K / 4u, t0 + t < nt); c++) {
            let wa = mat4x4<f32>(tile_w(r, c), tile_w(r + 1u, c), tile_w(r + 2u, c), tile_w(r + 3u, c));
            let wb = mat4x4<f32>(tile_w(r + 4u, c), tile_w(r + 5u, c), tile_w(r + 6u, c), tile_w(r + 7u, c));
            var xt = tile_x(t, c);
            a0 += xt * wa;
            b0 += xt * wb;
            xt = tile_x(t + 1u, c);
            a1 += xt * wa;
            b1 += xt * wb;
            xt = tile_x(t + 2u, c);
            a2 += xt * wa;
            b2 += xt * wb;
            xt = tile_x(t + 3u, c);
            a3 += xt * wa;
            b3 += xt * wb;
            xt = tile_x(t + 4u, c);
            a4 += xt * wa;
            b4 += xt * wb;
            xt = tile_x(t + 5u, c);
            a5 += xt * wa;
            b5 += xt * wb;
            xt = tile_x(t + 6u, c);
            a6 += xt * wa;
            b6 += xt * wb;
            xt = tile_x(t + 7u, c);
            a7 += xt * wa;
            b7 += xt * wb;
        }
        workgroupBarrier();
    }
    store_sq_parts(lid, sq);
    workgroupBarrier();
    // Normalised already with TILE_PRENORM.
    let rms_lo = select(inv_rms4(tile_sq4(tile_sq_at(8u * tg))), vec4<f32>(1.0), TILE_PRENORM);
    let rms_hi = select(inv_rms4(tile_sq4(tile_sq_at(8u * tg + 4u))), vec4<f32>(1.0), TILE_PRENORM);
    let out_a = r0 + select(8u * rg, 4u * rg, GATED); // slots 0-3's first output row
    let out_b = out_a + select(4u, 2u, GATED);
    let t = t0 + 8u * tg;
    store_tile8(t, out_a, out_b, a0, b0, rms_lo.x);
    store_tile8(t + 1u, out_a, out_b, a1, b1, rms_lo.y);
    store_tile8(t + 2u, out_a, out_b, a2, b2, rms_lo.z);
    store_tile8(t + 3u, out_a, out_b, a3, b3, rms_lo.w);
    store_tile8(t + 4u, out_a, out_b, a4, b4, rms_hi.x);
    store_tile8(t + 5u, out_a, out_b, a5, b5, rms_hi.y);
    store_tile8(t + 6u, out_a, out_b, a6, b6, rms_hi.z);
    store_tile8(t + 7u, out_a, out_b, a7, b7, rms_hi.w);
}
