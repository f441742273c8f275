// Greedy decoding's pick on the GPU: the index of the largest of V logits (the first one on
// ties, as on the CPU) and the largest and second-largest values, skipping the banned ids
// (the end-of-sequence tokens under ignore_eos) and those a grammar's mask forbids. One workgroup: each lane strides over the
// logits (adjacent lanes read adjacent words), then the lanes' top-2 pairs merge in a tree.

override V: u32; // logits

struct PickParams {
    n_banned: u32, // how many of `banned` apply this step (0: none)
    masked: u32,   // 1: only ids set in `allowed` (a grammar's mask this step)
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: PickParams;
@group(0) @binding(1) var<storage, read> logits: array<f32>;       // (V)
@group(0) @binding(2) var<storage, read> banned: array<u32>;       // ids never picked
@group(0) @binding(3) var<storage, read> allowed: array<u32>;      // (V / 32) bitmask, when masked
@group(0) @binding(4) var<storage, read_write> out: array<u32, 4>; // index, best, second (f32 bits), 0

const WG: u32 = 256u;
// The lowest finite f32 stands for -inf (Chromium's WGSL compiler refuses an infinite
// constant): no logit is picked unless it beats it, and a runner-up still at it is reported
// as none (gpu/ops/top2.rs).
const NEG_BIG: f32 = -3.40282346e38;
var<workgroup> first_v: array<f32, WG>;
var<workgroup> first_i: array<u32, WG>;
var<workgroup> second_v: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    var v1 = NEG_BIG;
    var i1 = 0xffffffffu;
    var v2 = NEG_BIG;
    for (var i = lid; i < V; i += WG) {
        let l = logits[i];
        if (skipped(i, params.n_banned, params.masked)) {
            continue;
        }
        // Each lane sees its indices in increasing order: a later equal value is only a runner-up.
        if (l > v1) {
            v2 = v1;
            v1 = l;
            i1 = i;
        } else if (l > v2) {
            v2 = l;
        }
    }
    first_v[lid] = v1;
    first_i[lid] = i1;
    second_v[lid] = v2;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let a1 = first_v[lid];
            let ai = first_i[lid];
            let a2 = second_v[lid];
            let c1 = first_v[lid + s];
            let ci = first_i[lid + s];
            let c2 = second_v[lid + s];
            if (c1 > a1 || (c1 == a1 && ci < ai)) {
                first_v[lid] = c1;
                first_i[lid] = ci;
                second_v[lid] = max(a1, c2);
            } else {
                second_v[lid] = max(a2, c1);
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[0] = first_i[0];
        out[1] = bitcast<u32>(first_v[0]);
        out[2] = bitcast<u32>(second_v[0]);
        out[3] = 0u;
    }
}
