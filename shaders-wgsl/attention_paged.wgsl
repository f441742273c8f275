// Causal grouped-query attention over the paged f16 KV cache. One workgroup per (KV head,
// token): query t (position start_pos + t) of each of the G = H / HKV query heads sharing KV
// head kh attends positions 0 ..= start_pos + t, read through the page table, so every key and
// value is loaded once for the whole group. Keys go in blocks of WG: each thread scores one key
// against the G queries, then each head's running max and sum are updated (online softmax)
// and each thread accumulates its own pairs of output dimensions for all G heads.

override H: u32;          // query heads
override HKV: u32;        // KV heads (divides H, H / HKV <= MAX_G)
override D: u32;          // head dimension (even, <= MAX_D)
override PAGE: u32 = 16u; // tokens per page

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;          // (T, H, D)
@group(0) @binding(2) var<storage, read> page_table: array<u32>; // (pages of the sequence) page ids
@group(0) @binding(3) var<storage, read> k_cache: array<u32>;    // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(4) var<storage, read> v_cache: array<u32>;    // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(5) var<storage, read_write> out: array<f32>;  // (T, H, D)

const WG: u32 = 64u;
const MAX_D: u32 = 256u;   // gpu/ops/attention_paged.rs MAX_HEAD_DIM
const MAX_G: u32 = 8u;     // gpu/ops/attention_paged.rs MAX_GROUP
const PAIRS_PER_THREAD: u32 = MAX_D / 2u / WG;
const NEG_BIG: f32 = -3.40282346e38; // a finite -inf: exp(NEG_BIG - m) is 0 without inf - inf

// 8 KiB + 2 × 2 KiB + 256 B, under WebGPU's 16 KiB of workgroup storage.
var<workgroup> qs: array<vec2<f32>, MAX_G * MAX_D / 2u>; // [g][i] the queries, pre-scaled by 1/sqrt(D)
var<workgroup> scores: array<f32, MAX_G * WG>;          // [g][j] this block's scores
var<workgroup> probs: array<f32, MAX_G * WG>;           // [g][j] exp(score - running max)
var<workgroup> key_at: array<u32, WG>;                  // cache word offset of each key of the block

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let kh = wid.x;
    let t = wid.y;
    if (t >= params.n_tokens) {
        return;
    }
    let g_count = H / HKV;
    let half_d = D / 2u;
    let scale = inverseSqrt(f32(D));
    for (var e = lid; e < g_count * half_d; e += WG) {
        let qi = (t * H + kh * g_count) * D + 2u * e; // heads of a group are adjacent
        qs[e] = vec2<f32>(q[qi], q[qi + 1u]) * scale;
    }
    workgroupBarrier();

    let n_keys = params.start_pos + t + 1u;
    var m = array<f32, MAX_G>();
    var l = array<f32, MAX_G>();
    for (var g = 0u; g < g_count; g++) {
        m[g] = NEG_BIG;
    }
    var acc = array<vec2<f32>, PAIRS_PER_THREAD * MAX_G>(); // [r][g]
    for (var k0 = 0u; k0 < n_keys; k0 += WG) {
        let n_block = min(WG, n_keys - k0);
        let p = k0 + lid;
        var s = array<f32, MAX_G>();
        if (lid < n_block) {
            let off = ((page_table[p / PAGE] * PAGE + p % PAGE) * HKV + kh) * half_d;
            for (var i = 0u; i < half_d; i++) {
                let kv = unpack2x16float(k_cache[off + i]);
                for (var g = 0u; g < g_count; g++) {
                    s[g] += dot(kv, qs[g * half_d + i]);
                }
            }
            key_at[lid] = off;
        } else {
            for (var g = 0u; g < g_count; g++) {
                s[g] = NEG_BIG;
            }
        }
        for (var g = 0u; g < g_count; g++) {
            scores[g * WG + lid] = s[g];
        }
        workgroupBarrier();
        var correction = array<f32, MAX_G>();
        for (var g = 0u; g < g_count; g++) {
            var block_max = NEG_BIG;
            for (var j = 0u; j < n_block; j++) {
                block_max = max(block_max, scores[g * WG + j]);
            }
            let m_new = max(m[g], block_max);
            correction[g] = exp(m[g] - m_new);
            probs[g * WG + lid] = select(0.0, exp(s[g] - m_new), lid < n_block);
            m[g] = m_new;
        }
        workgroupBarrier();
        for (var g = 0u; g < g_count; g++) {
            var block_sum = 0.0;
            for (var j = 0u; j < n_block; j++) {
                block_sum += probs[g * WG + j];
            }
            l[g] = l[g] * correction[g] + block_sum;
        }
        for (var r = 0u; r < PAIRS_PER_THREAD; r++) {
            let i = lid + r * WG;
            if (i < half_d) {
                for (var g = 0u; g < g_count; g++) {
                    acc[r * MAX_G + g] *= correction[g];
                }
                for (var j = 0u; j < n_block; j++) {
                    let vv = unpack2x16float(v_cache[key_at[j] + i]);
                    for (var g = 0u; g < g_count; g++) {
                        acc[r * MAX_G + g] += probs[g * WG + j] * vv;
                    }
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < PAIRS_PER_THREAD; r++) {
        let i = lid + r * WG;
        if (i < half_d) {
            for (var g = 0u; g < g_count; g++) {
                let o = acc[r * MAX_G + g] / l[g];
                let oi = (t * H + kh * g_count + g) * D + 2u * i;
                out[oi] = o.x;
                out[oi + 1u] = o.y;
            }
        }
    }
}
