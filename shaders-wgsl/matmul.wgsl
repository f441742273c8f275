// y = x · wᵀ (or y += x · wᵀ) for the rows of one weight part, the weights dequantized from
// their GGUF blocks as they are read. Decode on GPUs is `matvec_wide` (at the end). In
// `matmul_rows`, prefill everywhere and decode on CPU adapters, each thread computes a
// TOKENS × ROWS block of y straight from storage, holding it in registers: decode uses
// TOKENS = 1, prefill TOKENS = 4.
//
// Why no workgroup-memory tiles: on llvmpipe (the CPU Vulkan driver CI runs on) every storage
// or workgroup load whose address is not a compile-time uniform is a loop over the SIMD lanes,
// so loads, not multiply-adds, set the speed. Registers cost nothing by comparison, so each
// loaded x value serves ROWS weight rows and each dequantized weight serves TOKENS tokens.

override DTYPE: u32;               // ggml type id of w
override K: u32;                   // row length of w = columns of x
override N: u32;                   // rows of the whole weight = columns of y
override ACCUMULATE: bool = false; // y += x · wᵀ (residual adds) instead of y = x · wᵀ
override TOKENS: u32 = 1u;         // tokens per thread, <= MAX_TOKENS (gpu/ops/matmul.rs SHAPE)
override ROWS: u32 = 16u;          // weight rows per thread, <= MAX_ROWS
override NORM: bool = false;       // y = rmsnorm(x) · wᵀ: x's rows RMS-normalised and scaled by norm_w first
override EPS: f32 = 1e-5;          // with NORM: added to the mean square
override GATED: bool = false;      // the FFN's gate and up: y = silu(x·gateᵀ) ⊙ (x·upᵀ), see below
override SPLIT_QKV: bool = false;  // attention's q, k, v from one weight: rows to y, y_k, y_v
override N_Q: u32 = 0u;            // with SPLIT_QKV: q's rows (then N_KV of k, N_KV of v)
override N_KV: u32 = 0u;

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<uniform> part: Part;
@group(0) @binding(2) var<storage, read> x: array<f32>;       // (T, K)
@group(0) @binding(3) var<storage, read> w: array<u32>;       // (part.rows, row_bytes(K)) GGUF blocks
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // (T, N)
@group(0) @binding(5) var<storage, read> norm_w: array<f32>;  // (K) with NORM, else unused
@group(0) @binding(6) var<storage, read_write> y_k: array<f32>; // (T, N_KV) with SPLIT_QKV, else unused
@group(0) @binding(7) var<storage, read_write> y_v: array<f32>; // (T, N_KV) with SPLIT_QKV, else unused

// RMSNorm as this product's prologue: rmsnorm(x)·wᵀ = ((x ⊙ norm_w)·wᵀ) / rms(x), so the
// activations are scaled by norm_w as they are read and each output by 1/rms(x) at the end;
// the mean square comes from the same activations (no separate pass, no normalised copy).

/// Four consecutive raw activations starting at `at`.
fn x4_raw(at: u32) -> vec4<f32> {
    return vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
}

/// Activations k .. k + 3 of the row starting at `row`, times norm_w with NORM.
fn x4(row: u32, k: u32) -> vec4<f32> {
    let v = x4_raw(row + k);
    if (NORM) {
        return v * vec4<f32>(norm_w[k], norm_w[k + 1u], norm_w[k + 2u], norm_w[k + 3u]);
    }
    return v;
}

/// Activation k of the row starting at `row`, times norm_w[k] with NORM.
fn x1(row: u32, k: u32) -> f32 {
    if (NORM) {
        return x[row + k] * norm_w[k];
    }
    return x[row + k];
}

// GATED: the weight holds the gate's N rows, then the up projection's N rows (one buffer, one
// part); a thread's (or workgroup's) rows are its first half's outputs from the gate and the
// same outputs from up, so SiLU(gate)·up is its epilogue and y has N columns.

/// The weight row that row slot j of a block starting at output row r0 reads (`rows` slots).
fn weight_row(r0: u32, j: u32, rows: u32) -> u32 {
    if (GATED) {
        let half = rows / 2u;
        return select(N + min(r0 + j - half, N - 1u), min(r0 + j, N - 1u), j < half);
    }
    return min(r0 + j, part.rows - 1u);
}

/// Output rows a block of `rows` weight-row slots produces.
fn outputs_per_block(rows: u32) -> u32 {
    return select(rows, rows / 2u, GATED);
}

/// Output rows of this product (GATED: half the weight's).
fn output_rows() -> u32 {
    return select(part.rows, N, GATED);
}

fn silu(g: f32) -> f32 {
    return g / (1.0 + exp(-g));
}

/// 1 / rms of a row from its sum of squares (1 without NORM).
fn inv_rms(sum_sq: f32) -> f32 {
    return select(1.0, inverseSqrt(sum_sq / f32(K) + EPS), NORM);
}

fn weight_word(i: u32) -> u32 {
    return w[i];
}

fn store(t: u32, r: u32, v: f32) {
    if (SPLIT_QKV) {
        // One part (the loader keeps a split weight whole): r is the weight's row.
        if (r < N_Q) {
            y[t * N_Q + r] = v;
        } else if (r < N_Q + N_KV) {
            y_k[t * N_KV + r - N_Q] = v;
        } else {
            y_v[t * N_KV + r - N_Q - N_KV] = v;
        }
        return;
    }
    let i = t * N + part.first_row + r;
    if (ACCUMULATE) {
        y[i] += v;
    } else {
        y[i] = v;
    }
}

const MAX_TOKENS: u32 = 4u;
const MAX_ROWS: u32 = 16u;
const WG: u32 = 16u; // gpu/ops/matmul.rs WG

// Thread g of workgroup (wid.x, wid.y) computes y for tokens wid.y·TOKENS .. + TOKENS and
// weight rows (wid.x·WG + g)·ROWS .. + ROWS of this part. Tokens and rows past the end are
// clamped to the last one for loading (no branches in the inner loops) and never stored.
@compute @workgroup_size(WG)
fn matmul_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t0 = wid.y * TOKENS;
    let r0 = (wid.x * WG + lid) * outputs_per_block(ROWS); // the first output row
    let nt = params.n_tokens;
    if (t0 >= nt || r0 >= output_rows()) {
        return;
    }
    let rb = row_bytes(K);
    var xrow: array<u32, MAX_TOKENS>; // index of x[t, 0]
    for (var i = 0u; i < TOKENS; i++) {
        xrow[i] = min(t0 + i, nt - 1u) * K;
    }
    var wrow: array<u32, MAX_ROWS>; // byte offset of weight row r
    for (var j = 0u; j < ROWS; j++) {
        wrow[j] = weight_row(r0, j, ROWS) * rb;
    }
    var acc: array<array<f32, MAX_ROWS>, MAX_TOKENS>;
    var k = 0u;
    if (DTYPE == TYPE_Q4_1) {
        // 20-byte blocks are word-aligned: f16 d, f16 m, then word j holds the nibbles of
        // values j·4 .. j·4 + 3 (low halves) and 16 + j·4 .. (high halves).
        for (; k < K; k += 32u) {
            let b = k / 32u * 5u;
            var dm: array<vec2<f32>, MAX_ROWS>;
            for (var j = 0u; j < ROWS; j++) {
                dm[j] = unpack2x16float(w[wrow[j] / 4u + b]);
            }
            for (var g = 0u; g < 4u; g++) {
                var xl: array<vec4<f32>, MAX_TOKENS>;
                var xh: array<vec4<f32>, MAX_TOKENS>;
                for (var i = 0u; i < TOKENS; i++) {
                    let kg = k + g * 4u;
                    xl[i] = x4(xrow[i], kg);
                    xh[i] = x4(xrow[i], kg + 16u);
                }
                for (var j = 0u; j < ROWS; j++) {
                    let q = w[wrow[j] / 4u + b + 1u + g];
                    let lo = nibbles4(q, false) * dm[j].x + dm[j].y;
                    let hi = nibbles4(q, true) * dm[j].x + dm[j].y;
                    for (var i = 0u; i < TOKENS; i++) {
                        acc[i][j] += dot(xl[i], lo) + dot(xh[i], hi);
                    }
                }
            }
        }
    }
    if ((DTYPE == TYPE_Q8_0 || DTYPE == TYPE_Q4_0) && K % 64u == 0u) {
        // Rows of whole block pairs start on a word boundary. A Q8_0 pair is 17 words: f16 d0,
        // 32 bytes shifted by 16 bits, f16 d1 (the high half of word 8), 32 aligned bytes. A
        // Q4_0 pair is 9 words laid out the same way with 16 bytes of nibbles per block.
        let pair_words = select(17u, 9u, DTYPE == TYPE_Q4_0);
        let half = pair_words / 2u; // word holding d1 in its high half
        for (; k < K; k += 64u) {
            let p = k / 64u * pair_words;
            // Zeroed for every pair with explicit constructors: Chromium on SwiftShader keeps an
            // uninitialised `var` declared in a loop from the previous iteration.
            var s0 = array<array<f32, MAX_ROWS>, MAX_TOKENS>(); // block 0 sums, before d0
            var s1 = array<array<f32, MAX_ROWS>, MAX_TOKENS>(); // block 1 sums, before d1
            var prev: array<u32, MAX_ROWS>;
            for (var j = 0u; j < ROWS; j++) {
                prev[j] = w[wrow[j] / 4u + p];
            }
            let groups = half; // Q8_0: 8 groups of 4 bytes; Q4_0: 4 words of 2 × 4 nibbles
            for (var g = 0u; g < groups; g++) {
                var xa: array<vec4<f32>, MAX_TOKENS>;
                var xb: array<vec4<f32>, MAX_TOKENS>;
                var xc: array<vec4<f32>, MAX_TOKENS>;
                var xd: array<vec4<f32>, MAX_TOKENS>;
                for (var i = 0u; i < TOKENS; i++) {
                    let kg = k + g * 4u;
                    xa[i] = x4(xrow[i], kg);
                    xb[i] = x4(xrow[i], kg + 32u);
                    if (DTYPE == TYPE_Q4_0) {
                        xc[i] = x4(xrow[i], kg + 16u);
                        xd[i] = x4(xrow[i], kg + 48u);
                    }
                }
                for (var j = 0u; j < ROWS; j++) {
                    let next = w[wrow[j] / 4u + p + g + 1u];
                    let q0 = (prev[j] >> 16u) | (next << 16u);
                    let q1 = w[wrow[j] / 4u + p + half + 1u + g];
                    prev[j] = next;
                    if (DTYPE == TYPE_Q4_0) {
                        let a = nibbles4(q0, false) - 8.0;
                        let c = nibbles4(q0, true) - 8.0;
                        let b = nibbles4(q1, false) - 8.0;
                        let d = nibbles4(q1, true) - 8.0;
                        for (var i = 0u; i < TOKENS; i++) {
                            s0[i][j] += dot(xa[i], a) + dot(xc[i], c);
                            s1[i][j] += dot(xb[i], b) + dot(xd[i], d);
                        }
                    } else {
                        let a = i8x4(q0);
                        let b = i8x4(q1);
                        for (var i = 0u; i < TOKENS; i++) {
                            s0[i][j] += dot(xa[i], a);
                            s1[i][j] += dot(xb[i], b);
                        }
                    }
                }
            }
            for (var j = 0u; j < ROWS; j++) {
                let d0 = unpack2x16float(w[wrow[j] / 4u + p]).x;
                let d1 = unpack2x16float(w[wrow[j] / 4u + p + half]).y;
                for (var i = 0u; i < TOKENS; i++) {
                    acc[i][j] += d0 * s0[i][j] + d1 * s1[i][j];
                }
            }
        }
    }
    for (; k + 4u <= K; k += 4u) {
        var xv: array<vec4<f32>, MAX_TOKENS>;
        for (var i = 0u; i < TOKENS; i++) {
            xv[i] = x4(xrow[i], k);
        }
        for (var j = 0u; j < ROWS; j++) {
            let wv = weights4(wrow[j], k);
            for (var i = 0u; i < TOKENS; i++) {
                acc[i][j] += dot(xv[i], wv);
            }
        }
    }
    for (; k < K; k++) {
        for (var j = 0u; j < ROWS; j++) {
            let wv = weight1(wrow[j], k);
            for (var i = 0u; i < TOKENS; i++) {
                acc[i][j] += wv * x1(xrow[i], k);
            }
        }
    }
    for (var i = 0u; i < TOKENS; i++) {
        // With NORM, the row's mean square: a second walk over x, which the cache holds.
        var sum_sq = 0.0;
        if (NORM) {
            for (var c = 0u; c + 4u <= K; c += 4u) {
                let v = x4_raw(xrow[i] + c);
                sum_sq += dot(v, v);
            }
            for (var c = K / 4u * 4u; c < K; c++) {
                sum_sq += x[xrow[i] + c] * x[xrow[i] + c];
            }
        }
        let scale = inv_rms(sum_sq);
        if (GATED) {
            for (var j = 0u; j < ROWS / 2u; j++) {
                if (t0 + i < nt && r0 + j < N) {
                    store(t0 + i, r0 + j, silu(acc[i][j] * scale) * (acc[i][j + ROWS / 2u] * scale));
                }
            }
        } else {
            for (var j = 0u; j < ROWS; j++) {
                if (t0 + i < nt && r0 + j < part.rows) {
                    store(t0 + i, r0 + j, acc[i][j] * scale);
                }
            }
        }
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
// added in a tree in workgroup memory.
@compute @workgroup_size(WIDE_WG)
fn matvec_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = linear_group(wid, nwg) * outputs_per_block(WIDE_ROWS); // the first output row
    if (r0 >= output_rows()) {
        return; // the whole workgroup: r0 is uniform
    }
    let nt = min(params.n_tokens, MAX_TOKENS);
    let rb = row_bytes(K);
    var wrow = array<u32, WIDE_ROWS>();
    for (var j = 0u; j < WIDE_ROWS; j++) {
        wrow[j] = weight_row(r0, j, WIDE_ROWS) * rb;
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
            let wv = weights4(wrow[j], k);
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
            let wv = weight1(wrow[j], k);
            for (var i = 0u; i < nt; i++) {
                acc[i][j] += wv * x1(i * K, k);
            }
        }
    }
    // Entry i·WIDE_ROWS + j: token i's row j; entry MAX_TOKENS·WIDE_ROWS + i: token i's sum of squares.
    for (var i = 0u; i < MAX_TOKENS; i++) {
        for (var j = 0u; j < WIDE_ROWS; j++) {
            lane_sums[(i * WIDE_ROWS + j) * WIDE_WG + lid] = acc[i][j];
        }
        lane_sums[(MAX_TOKENS * WIDE_ROWS + i) * WIDE_WG + lid] = sum_sq[i];
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
    let per = outputs_per_block(WIDE_ROWS);
    if (lid < nt * per) {
        let i = lid / per;
        let j = lid % per;
        let scale = inv_rms(lane_sums[(MAX_TOKENS * WIDE_ROWS + i) * WIDE_WG]);
        let sum = lane_sums[(i * WIDE_ROWS + j) * WIDE_WG] * scale;
        if (GATED && r0 + j < N) {
            store(i, r0 + j, silu(sum) * (lane_sums[(i * WIDE_ROWS + j + per) * WIDE_WG] * scale));
        } else if (!GATED && r0 + j < part.rows) {
            store(i, r0 + j, sum);
        }
    }
}
