// What every matrix product kernel shares (matmul.wgsl, matvec_blocks.wgsl): the product's
// specialisation, its bindings but the activations and norm weights (each kernel declares those
// as it reads them, at bindings 2 and 5), and the epilogues that store y or the KV pages.

override DTYPE: u32;               // ggml type id of w (of its rows before HI_ROW, where it has two types)
override DTYPE_HI: u32;            // ggml type id of its rows from HI_ROW on, where it has two types (else DTYPE)
override HI_ROW: u32 = 0u;         // the first row of type DTYPE_HI; 0: every row is DTYPE (see below)
override K: u32;                   // row length of w = columns of x
override N: u32;                   // rows of the whole weight = columns of y
override ACCUMULATE: bool = false; // y += x · wᵀ (residual adds) instead of y = x · wᵀ
override NORM: bool = false;       // y = rmsnorm(x) · wᵀ: x's rows RMS-normalised and scaled by norm_w first
override EPS: f32 = 1e-5;          // with NORM: added to the mean square
override GATED: bool = false;      // the FFN's gate and up: y = act(x·gateᵀ) ⊙ (x·upᵀ), see below
override GELU: bool = false;       // with GATED: act is GELU (tanh approximation, gemma3), else SiLU
override ATTN_IN: bool = false;    // attention's input: q, k, v rows with RoPE and the KV write, see below
override N_Q: u32 = 0u;            // with ATTN_IN: q's rows of the whole q/k/v weight (then N_KV of k, N_KV of v)
override N_KV: u32 = 0u;
override QKV_FIRST: u32 = 0u;      // with ATTN_IN: the whole q/k/v weight's row this weight starts at
override HEAD_DIM: u32 = 64u;      // with ATTN_IN: RoPE pairs within heads of this many rows
override PAGE: u32 = 16u;          // with ATTN_IN: tokens per KV page
override ROPE_NEOX: bool = false;  // with ATTN_IN: RoPE pairs rows i and i + HEAD_DIM / 2 of a head (qwen2)
override BIAS: bool = false;       // with ATTN_IN: q, k and v have biases (qkv_bias)
override QK_NORM: bool = false;    // with ATTN_IN: q and k are normalised per head before RoPE (qk_norm.wgsl), see below

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<uniform> part: Part;
@group(0) @binding(3) var<storage, read> w: array<u32>;       // (part.rows, row_bytes(DTYPE, K)) GGUF blocks (DTYPE_HI's from HI_ROW)
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // (T, N); with ATTN_IN (T, N_Q), with QK_NORM (T, N_Q + N_KV)
// With ATTN_IN, else unused: the sequence's page table and this layer's f16 caches.
@group(0) @binding(6) var<storage, read> page_table: array<u32>;    // (pages of the sequence) page ids
@group(0) @binding(7) var<storage, read_write> k_cache: array<u32>; // (pages, PAGE, N_KV / 2) f16 pairs
@group(0) @binding(8) var<storage, read_write> v_cache: array<u32>; // (pages, PAGE, N_KV / 2) f16 pairs
@group(0) @binding(9) var<uniform> rope_freqs: RopeFreqs;
@group(0) @binding(10) var<storage, read> qkv_bias: array<f32>; // (N_Q + 2·N_KV) with BIAS, else unused

// Two types (HI_ROW > 0): a q/k/v weight whose k and v rows, or v's alone, a quantization mix
// keeps in another type (Q4_K_M: Q6_K for some layers' v) is still one product. HI_ROW is a
// multiple of 64 (gpu/ops/matmul.rs `reads_two_types`), so the rows of a workgroup, a tile, a
// thread or a lane group are all of one type: each picks its type once, and the readers' switch
// on it is uniform there (no divergence). Without HI_ROW the type is DTYPE, a constant, and the
// compiler keeps only its case; one call of each reader either way, so a pipeline of one type
// compiles as it would without this.

/// Whether weight row r (of this part) is of type DTYPE_HI.
fn is_hi(r: u32) -> bool {
    return HI_ROW != 0u && r >= HI_ROW;
}

/// The byte where weight row r (of this part) starts.
fn row_start(r: u32) -> u32 {
    if (is_hi(r)) {
        return HI_ROW * row_bytes(DTYPE, K) + (r - HI_ROW) * row_bytes(DTYPE_HI, K);
    }
    return r * row_bytes(DTYPE, K);
}

/// The type of rows of type DTYPE_HI (`hi`) or DTYPE.
fn row_type(hi: bool) -> u32 {
    return select(DTYPE, DTYPE_HI, hi);
}

// GATED: the weight holds the gate's N rows, then the up projection's N rows (one buffer, one
// part); a thread's (or workgroup's) rows are its first half's outputs from the gate and the
// same outputs from up, so act(gate)·up is its epilogue and y has N columns.

/// The weight row that row slot j of a block starting at output row r0 reads (`rows` slots).
fn weight_row(r0: u32, j: u32, rows: u32) -> u32 {
    if (GATED) {
        let half = rows / 2u;
        return select(N + min(r0 + j - half, N - 1u), min(r0 + j, N - 1u), j < half);
    }
    let r = min(r0 + j, part.rows - 1u);
    if (ATTN_IN && ROPE_NEOX) {
        let first = QKV_FIRST + part.first_row;
        return source_row(first + r) - first;
    }
    return r;
}

/// Output rows a block of `rows` weight-row slots produces.
fn outputs_per_block(rows: u32) -> u32 {
    return select(rows, rows / 2u, GATED);
}

/// Output rows of this product (GATED: half the weight's).
fn output_rows() -> u32 {
    return select(part.rows, N, GATED);
}

fn act(g: f32) -> f32 {
    return act4(vec4<f32>(g)).x;
}

/// 1 / rms of a row from its sum of squares (1 without NORM).
fn inv_rms(sum_sq: f32) -> f32 {
    return select(1.0, inverseSqrt(sum_sq / f32(K) + EPS), NORM);
}

/// inv_rms of four rows.
fn inv_rms4(sum_sq: vec4<f32>) -> vec4<f32> {
    return select(vec4<f32>(1.0), inverseSqrt(sum_sq / f32(K) + EPS), NORM);
}

fn weight_word(i: u32) -> u32 {
    return w[i];
}

fn store(t: u32, r: u32, v: f32) {
    let i = t * N + part.first_row + r;
    if (ACCUMULATE) {
        y[i] += v;
    } else {
        y[i] = v;
    }
}

// ATTN_IN: the rows of the whole q/k/v weight are q's N_Q (heads of HEAD_DIM), k's N_KV, then
// v's N_KV; this product's weight (all of it, or q, k or v alone) starts at row QKV_FIRST. Its
// epilogue rotates q and k by RoPE (llama.cpp's "normal" mode: the adjacent rows 2i, 2i + 1 of
// a head turn by pos · rope_freqs[i]), writes q to y (T, N_Q) and k and v as f16
// pairs to slot pos % PAGE of page page_table[pos / PAGE], pos = start_pos + t. A thread (or
// workgroup) always holds both rows of a pair: its rows start even and weight parts hold
// whole pairs.

// ROPE_NEOX (qwen2): RoPE pairs each row i of a head with row i + HEAD_DIM / 2. The product
// computes q's and k's rows in an order that makes those pairs adjacent, output row 2i of a head
// from weight row i and 2i + 1 from i + HEAD_DIM / 2, so the epilogue is the same and q·k over
// a head (what attention reads) is unchanged; v keeps its order. A weight part holds whole heads.

/// The q/k/v weight row (and bias) of output row `row`, both counted in the whole q/k/v weight.
fn source_row(row: u32) -> u32 {
    if (!ROPE_NEOX || row >= N_Q + N_KV) {
        return row;
    }
    let s = row % HEAD_DIM;
    return row - s + s / 2u + (s % 2u) * (HEAD_DIM / 2u);
}

/// Token t's rows r, r + 1 (r even) of this part, as the ATTN_IN epilogue says.
fn store_attention_pair(t: u32, r: u32, sum: vec2<f32>) {
    let row = QKV_FIRST + part.first_row + r;
    let pos = params.start_pos + t;
    var v = sum;
    if (BIAS) {
        v += vec2<f32>(qkv_bias[source_row(row)], qkv_bias[source_row(row + 1u)]);
    }
    if (row >= N_Q + N_KV) {
        v_cache[kv_slot(pos) + (row - N_Q - N_KV) / 2u] = pack2x16float(v);
        return;
    }
    // QK_NORM: q's and k's rows as they are, for qk_norm.wgsl to normalise each head, rotate
    // it and write it where it goes.
    if (QK_NORM) {
        y[t * (N_Q + N_KV) + row] = v.x;
        y[t * (N_Q + N_KV) + row + 1u] = v.y;
        return;
    }
    // N_Q is whole heads: row % HEAD_DIM is the row within its head for q and k alike.
    let turned = rope(v, pos, row % HEAD_DIM / 2u);
    if (row < N_Q) {
        y[t * N_Q + row] = turned.x;
        y[t * N_Q + row + 1u] = turned.y;
    } else {
        k_cache[kv_slot(pos) + (row - N_Q) / 2u] = pack2x16float(turned);
    }
}

/// The first word of position pos in a KV cache.
fn kv_slot(pos: u32) -> u32 {
    return (page_table[pos / PAGE] * PAGE + pos % PAGE) * (N_KV / 2u);
}
