// Causal grouped-query attention over the paged f16 KV cache. One workgroup per (head, token):
// query t (position start_pos + t) attends positions 0 ..= start_pos + t of its KV head
// h / (H / HKV), read through the page table. Keys go in blocks of WG: each thread scores one
// key, then the block updates a running max and sum (online softmax) and each thread
// accumulates its own pairs of output dimensions.

override H: u32;          // query heads
override HKV: u32;        // KV heads (divides H)
override D: u32;          // head dimension (even, <= MAX_D)
override PAGE: u32 = 16u; // tokens per page

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;          // (T, H, D)
@group(0) @binding(2) var<storage, read> page_table: array<u32>; // (pages of the sequence) page ids
@group(0) @binding(3) var<storage, read> k_cache: array<u32>;    // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(4) var<storage, read> v_cache: array<u32>;    // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(5) var<storage, read_write> out: array<f32>;  // (T, H, D)

const WG: u32 = 64u;
const MAX_D: u32 = 256u;
const PAIRS_PER_THREAD: u32 = MAX_D / 2u / WG;
const NEG_BIG: f32 = -3.4028235e38; // a finite -inf: exp(NEG_BIG - m) is 0 without inf - inf

var<workgroup> qs: array<vec2<f32>, MAX_D / 2u>; // the query, pre-scaled by 1/sqrt(D)
var<workgroup> scores: array<f32, WG>;           // this block's scores
var<workgroup> probs: array<f32, WG>;            // exp(score - running max)
var<workgroup> key_at: array<u32, WG>;           // cache word offset of each key of the block

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y;
    if (t >= params.n_tokens) {
        return;
    }
    let kh = h / (H / HKV);
    let half_d = D / 2u;
    let scale = inverseSqrt(f32(D));
    for (var i = lid; i < half_d; i += WG) {
        let qi = (t * H + h) * D + 2u * i;
        qs[i] = vec2<f32>(q[qi], q[qi + 1u]) * scale;
    }
    workgroupBarrier();

    let n_keys = params.start_pos + t + 1u;
    var m = NEG_BIG;
    var l = 0.0;
    var acc = array<vec2<f32>, PAIRS_PER_THREAD>();
    for (var k0 = 0u; k0 < n_keys; k0 += WG) {
        let n_block = min(WG, n_keys - k0);
        let p = k0 + lid;
        var s = NEG_BIG;
        if (lid < n_block) {
            let off = ((page_table[p / PAGE] * PAGE + p % PAGE) * HKV + kh) * half_d;
            var dot_ = 0.0;
            for (var i = 0u; i < half_d; i++) {
                dot_ += dot(unpack2x16float(k_cache[off + i]), qs[i]);
            }
            s = dot_;
            key_at[lid] = off;
        }
        scores[lid] = s;
        workgroupBarrier();
        var block_max = NEG_BIG;
        for (var j = 0u; j < n_block; j++) {
            block_max = max(block_max, scores[j]);
        }
        let m_new = max(m, block_max);
        let correction = exp(m - m_new);
        probs[lid] = select(0.0, exp(s - m_new), lid < n_block);
        m = m_new;
        workgroupBarrier();
        var block_sum = 0.0;
        for (var j = 0u; j < n_block; j++) {
            block_sum += probs[j];
        }
        l = l * correction + block_sum;
        for (var r = 0u; r < PAIRS_PER_THREAD; r++) {
            let i = lid + r * WG;
            if (i < half_d) {
                var a = acc[r] * correction;
                for (var j = 0u; j < n_block; j++) {
                    a += probs[j] * unpack2x16float(v_cache[key_at[j] + i]);
                }
                acc[r] = a;
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < PAIRS_PER_THREAD; r++) {
        let i = lid + r * WG;
        if (i < half_d) {
            let o = acc[r] / l;
            let oi = (t * H + h) * D + 2u * i;
            out[oi] = o.x;
            out[oi + 1u] = o.y;
        }
    }
}
