// out = x / sqrt(mean(x²) + eps) * w per row; one workgroup per row. With LAST_ROW_ONLY the
// single workgroup normalises row n_tokens - 1 into out row 0 (the LM head's input); with ADD
// the rows are added to out (a post norm's residual add: gemma3).

override C: u32;                      // row length
override EPS: f32;                    // added to the mean square
override LAST_ROW_ONLY: bool = false;
override ADD: bool = false;

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;         // (T, C)
@group(0) @binding(2) var<storage, read> w: array<f32>;         // (C)
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (T, C), or (1, C) with LAST_ROW_ONLY

const WG: u32 = 256u;
var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (params.n_tokens == 0u || wid.x >= params.n_tokens) {
        return;
    }
    let row = select(wid.x, params.n_tokens - 1u, LAST_ROW_ONLY);
    let out_row = select(row, 0u, LAST_ROW_ONLY);
    var ss = 0.0;
    for (var c = lid; c < C; c += WG) {
        let v = x[row * C + c];
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
    let scale = 1.0 / sqrt(partial[0] / f32(C) + EPS);
    for (var c = lid; c < C; c += WG) {
        let v = x[row * C + c] * scale * w[c];
        out[out_row * C + c] = select(v, out[out_row * C + c] + v, ADD);
    }
}
