// The K_OUT largest logits with their ids, for sampling with top-k on the GPU: a step then
// reads back K_OUT (id, logit) pairs instead of V logits. Each workgroup sorts a chunk of CHUNK
// candidates in workgroup memory (a bitonic network: largest logit first, the lower id first
// on ties, as the CPU sampler orders them) and keeps its first K_OUT; passes repeat over the
// kept candidates until one chunk remains. The first pass reads the logits, skipping the
// banned ids (the end-of-sequence tokens under ignore_eos) and those a grammar's mask forbids.

struct SelectParams {
    n_in: u32,        // candidates this pass reads
    from_logits: u32, // 1: read logits (id = index), 0: read (id, logit) pairs
    n_banned: u32,    // how many of `banned` apply (first pass only)
    masked: u32,      // 1: only ids set in `allowed` (first pass only)
}

@group(0) @binding(0) var<uniform> params: SelectParams;
@group(0) @binding(1) var<storage, read> logits: array<f32>;       // (V)
@group(0) @binding(2) var<storage, read> banned: array<u32>;       // ids never kept
@group(0) @binding(3) var<storage, read> allowed: array<u32>;      // (V / 32) bitmask, when masked
@group(0) @binding(4) var<storage, read> cand_in: array<u32>;      // (n_in, 2) id, logit bits
@group(0) @binding(5) var<storage, read_write> cand_out: array<u32>; // (chunks, K_OUT, 2)

const WG: u32 = 256u;
const CHUNK: u32 = 1024u; // gpu/ops/topk.rs CHUNK
const K_OUT: u32 = 64u;   // gpu/ops/topk.rs MAX_TOP_K
const NONE: u32 = 0xffffffffu;
const NEG_BIG: f32 = -3.40282346e38; // stands for -inf: Chromium's WGSL compiler refuses an infinite constant

var<workgroup> vals: array<f32, CHUNK>;
var<workgroup> ids: array<u32, CHUNK>;

// Whether candidate a goes before candidate b: a larger logit, or the same and a lower id.
// NaN sorts as the lowest value.
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    let a = select(NEG_BIG, va, va == va);
    let b = select(NEG_BIG, vb, vb == vb);
    return a > b || (a == b && ia < ib);
}

@compute @workgroup_size(WG)
fn select_top(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let base = wid.x * CHUNK;
    for (var e = lid; e < CHUNK; e += WG) {
        let i = base + e;
        var v = NEG_BIG;
        var id = NONE;
        if (i < params.n_in) {
            if (params.from_logits == 1u) {
                if (!skipped(i, params.n_banned, params.masked)) {
                    v = logits[i];
                    id = i;
                }
            } else {
                id = cand_in[2u * i];
                v = bitcast<f32>(cand_in[2u * i + 1u]);
            }
        }
        vals[e] = v;
        ids[e] = id;
    }
    workgroupBarrier();
    // Bitonic sort of the chunk into "before" order: each lane compares CHUNK / 2 / WG pairs.
    for (var size = 2u; size <= CHUNK; size <<= 1u) {
        for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
            for (var p = lid; p < CHUNK / 2u; p += WG) {
                // The p-th pair of this stage: i has a 0 at bit `stride`, j = i + stride.
                let i = (p / stride) * stride * 2u + p % stride;
                let j = i + stride;
                let ascending = (i & size) == 0u; // runs of `size` alternate direction
                let swap = select(before(vals[i], ids[i], vals[j], ids[j]), before(vals[j], ids[j], vals[i], ids[i]), ascending);
                if (swap) {
                    let tv = vals[i];
                    vals[i] = vals[j];
                    vals[j] = tv;
                    let ti = ids[i];
                    ids[i] = ids[j];
                    ids[j] = ti;
                }
            }
            workgroupBarrier();
        }
    }
    for (var e = lid; e < K_OUT; e += WG) {
        let o = (wid.x * K_OUT + e) * 2u;
        cand_out[o] = ids[e];
        cand_out[o + 1u] = bitcast<u32>(vals[e]);
    }
}
