// Index of the largest of V logits (the first one on ties), for greedy decoding without
// reading the logits back.

override V: u32; // logits

@group(0) @binding(0) var<storage, read> logits: array<f32>;    // (V)
@group(0) @binding(1) var<storage, read_write> out: array<u32>; // (1) the index

const WG: u32 = 256u;
var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    var bv = -3.40282346e38;
    var bi = 0xffffffffu;
    for (var i = lid; i < V; i += WG) {
        if (logits[i] > bv) {
            bv = logits[i];
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let ov = best_v[lid + s];
            let oi = best_i[lid + s];
            if (ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid])) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[0] = best_i[0];
    }
}
