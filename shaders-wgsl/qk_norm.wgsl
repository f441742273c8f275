// q and k normalised per head, then rotated (Qwen3, Gemma 3): each head of the raw q and k rows
// the attention-input product wrote (matmul.wgsl QK_NORM: (T, N_Q + N_KV), heads of HEAD_DIM,
// in that product's row order) is RMS-normalised over its HEAD_DIM values and scaled by its
// norm weights (attn_q_norm or attn_k_norm), then RoPE turns its pairs (2i, 2i + 1) by
// pos · rope_freqs[i]; q goes to `q` (T, N_Q) and k as f16 pairs to the KV page of its position.
// One workgroup per (token, head).
//
// With ROPE_NEOX the product wrote each head's rows reordered so that RoPE's pairs are adjacent
// (row 2i of a head is weight row i, 2i + 1 is i + HEAD_DIM / 2): a row's norm weight is that
// of its weight row.

override N_Q: u32;               // q's rows (whole heads)
override N_KV: u32;              // k's rows
override HEAD_DIM: u32;
override PAGE: u32;              // tokens per KV page
override EPS: f32;               // added to the mean square
override ROPE_NEOX: bool = false;

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read> raw: array<f32>;            // (T, N_Q + N_KV)
@group(0) @binding(2) var<storage, read> q_norm: array<f32>;         // (HEAD_DIM)
@group(0) @binding(3) var<storage, read> k_norm: array<f32>;         // (HEAD_DIM)
@group(0) @binding(4) var<storage, read> page_table: array<u32>;     // (pages of the sequence) page ids
@group(0) @binding(5) var<storage, read_write> q: array<f32>;        // (T, N_Q)
@group(0) @binding(6) var<storage, read_write> k_cache: array<u32>;  // (pages, PAGE, N_KV / 2) f16 pairs
@group(0) @binding(7) var<uniform> rope_freqs: RopeFreqs;

const WG: u32 = 64u;
var<workgroup> partial: array<f32, WG>;

/// The weight row (within its head) of row s of a head as the product wrote it.
fn weight_row(s: u32) -> u32 {
    if (ROPE_NEOX) {
        return s / 2u + (s % 2u) * (HEAD_DIM / 2u);
    }
    return s;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let heads = (N_Q + N_KV) / HEAD_DIM;
    let g = linear_group(wid, nwg);
    let t = g / heads;
    if (t >= params.n_tokens) {
        return;
    }
    let head = g % heads;
    let base = t * (N_Q + N_KV) + head * HEAD_DIM;
    var ss = 0.0;
    for (var s = lid; s < HEAD_DIM; s += WG) {
        let v = raw[base + s];
        ss += v * v;
    }
    partial[lid] = ss;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(partial[0] / f32(HEAD_DIM) + EPS);
    let is_q = head * HEAD_DIM < N_Q;
    let pos = params.start_pos + t;
    for (var i = lid; i < HEAD_DIM / 2u; i += WG) {
        let s = 2u * i;
        let wa = weight_row(s);
        let wb = weight_row(s + 1u);
        let w = select(vec2<f32>(k_norm[wa], k_norm[wb]), vec2<f32>(q_norm[wa], q_norm[wb]), is_q);
        let turned = rope(vec2<f32>(raw[base + s], raw[base + s + 1u]) * scale * w, pos, i);
        let row = head * HEAD_DIM + s;
        if (is_q) {
            q[t * N_Q + row] = turned.x;
            q[t * N_Q + row + 1u] = turned.y;
        } else {
            let slot = (page_table[pos / PAGE] * PAGE + pos % PAGE) * (N_KV / 2u);
            k_cache[slot + (row - N_Q) / 2u] = pack2x16float(turned);
        }
    }
}
