// Causal grouped-query attention over the paged f16 KV cache, split over the keys
// (flash-decoding): `partial` gives one workgroup to each (key split, KV head, token), so a
// single decoded token over a long cached prefix still spreads over many workgroups; `combine`
// merges each query head's splits. Query t (position start_pos + t) of each of the G = H / HKV
// query heads sharing KV head kh attends positions 0 ..= start_pos + t, read through the page
// table.
//
// A split of `partial` walks its keys in tiles of TK: the lanes load the tile's keys into
// workgroup memory together (adjacent lanes read adjacent words of a key), score them against
// the G queries, update each head's running max and sum (online softmax), load the values over
// the keys and accumulate. Each split leaves its unnormalised output, max and sum in `scratch`.
// `lanes` computes the same splits without workgroup memory, for CPU adapters.

override H: u32;          // query heads
override HKV: u32;        // KV heads (divides H, H / HKV <= MAX_G)
override D: u32;          // head dimension (even, <= MAX_D)
override PAGE: u32 = 16u; // tokens per page
override TK: u32;         // keys per tile (gpu/ops/attention_paged.rs tile_keys: TK · (D/2 + 1) <= TILE_WORDS)

struct SplitParams {
    keys_per_split: u32, // a multiple of TK
    splits: u32,         // splits per (token, head) in `scratch`
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<uniform> split: SplitParams;
@group(0) @binding(2) var<storage, read> q: array<f32>;            // (T, H, D)
@group(0) @binding(3) var<storage, read> page_table: array<u32>;   // (pages of the sequence) page ids
@group(0) @binding(4) var<storage, read> k_cache: array<u32>;      // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(5) var<storage, read> v_cache: array<u32>;      // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(6) var<storage, read_write> scratch: array<f32>; // (T, H, splits, D + 2): output, max, sum
@group(0) @binding(7) var<storage, read_write> out: array<f32>;     // (T, H, D)

const WG: u32 = 64u;
const MAX_D: u32 = 256u;      // gpu/ops/attention_paged.rs MAX_HEAD_DIM
const MAX_G: u32 = 8u;        // gpu/ops/attention_paged.rs MAX_GROUP
const MAX_TK: u32 = 32u;      // gpu/ops/attention_paged.rs MAX_TILE_KEYS
const TILE_WORDS: u32 = 1040u; // gpu/ops/attention_paged.rs TILE_WORDS: 16 keys of D = 128, 8 of D = 256
const OUT_PER_LANE: u32 = MAX_G * MAX_D / 2u / WG;
const NEG_BIG: f32 = -3.40282346e38; // a finite -inf: exp(NEG_BIG - m) is 0 without inf - inf

// 8 KiB + 4160 B + 1 KiB + 96 B, under WebGPU's 16 KiB of workgroup storage.
var<workgroup> qs: array<vec2<f32>, MAX_G * MAX_D / 2u>; // [g][i] the queries, pre-scaled by 1/sqrt(D)
var<workgroup> tile: array<u32, TILE_WORDS>;              // [j][i] a tile's keys, then its values (rows padded by a word)
var<workgroup> probs: array<f32, MAX_G * MAX_TK>;         // [g][j] scores, then exp(score - running max)
var<workgroup> run_max: array<f32, MAX_G>;
var<workgroup> run_sum: array<f32, MAX_G>;
var<workgroup> correction: array<f32, MAX_G>;

// The cache word where position p's pairs for KV head kh begin.
fn cache_offset(p: u32, kh: u32) -> u32 {
    return ((page_table[p / PAGE] * PAGE + p % PAGE) * HKV + kh) * (D / 2u);
}

fn load_tile(cache_is_k: bool, k0: u32, n: u32, kh: u32, lid: u32) {
    let half_d = D / 2u;
    let row = half_d + 1u; // a padded row: lanes reading key j and j + 1 hit different banks
    for (var w = lid; w < n * half_d; w += WG) {
        let j = w / half_d;
        let i = w % half_d;
        let at = cache_offset(k0 + j, kh) + i;
        if (cache_is_k) {
            tile[j * row + i] = k_cache[at];
        } else {
            tile[j * row + i] = v_cache[at];
        }
    }
}

@compute @workgroup_size(WG)
fn partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = wid.x;
    let kh = wid.y;
    let t = wid.z;
    let n_keys = params.start_pos + t + 1u;
    let k_begin = s * split.keys_per_split;
    // Uniform per workgroup: a token past the batch, or a split past this query's keys.
    if (t >= params.n_tokens || k_begin >= n_keys) {
        return;
    }
    let k_end = min(k_begin + split.keys_per_split, n_keys);
    let g_count = H / HKV;
    let half_d = D / 2u;
    let row = half_d + 1u;
    let scale = inverseSqrt(f32(D));
    for (var e = lid; e < g_count * half_d; e += WG) {
        let qi = (t * H + kh * g_count) * D + 2u * e; // heads of a group are adjacent
        qs[e] = vec2<f32>(q[qi], q[qi + 1u]) * scale;
    }
    if (lid < g_count) {
        run_max[lid] = NEG_BIG;
        run_sum[lid] = 0.0;
    }
    var acc = array<vec2<f32>, OUT_PER_LANE>(); // output pairs lid, lid + WG, … of [g][i]
    workgroupBarrier();

    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        let n = min(TK, k_end - k0);
        load_tile(true, k0, n, kh, lid);
        workgroupBarrier();
        for (var e = lid; e < g_count * TK; e += WG) {
            let g = e / TK;
            let j = e % TK;
            var score = NEG_BIG;
            if (j < n) {
                score = 0.0;
                for (var i = 0u; i < half_d; i++) {
                    score += dot(unpack2x16float(tile[j * row + i]), qs[g * half_d + i]);
                }
            }
            probs[g * MAX_TK + j] = score;
        }
        workgroupBarrier();
        if (lid < g_count) {
            let g = lid;
            var m_new = run_max[g];
            for (var j = 0u; j < n; j++) {
                m_new = max(m_new, probs[g * MAX_TK + j]);
            }
            var sum = 0.0;
            for (var j = 0u; j < n; j++) {
                let p = exp(probs[g * MAX_TK + j] - m_new);
                probs[g * MAX_TK + j] = p;
                sum += p;
            }
            correction[g] = exp(run_max[g] - m_new);
            run_sum[g] = run_sum[g] * correction[g] + sum;
            run_max[g] = m_new;
        }
        load_tile(false, k0, n, kh, lid); // the keys are scored: the tile takes the values
        workgroupBarrier();
        for (var r = 0u; r < OUT_PER_LANE; r++) {
            let o = lid + r * WG;
            if (o < g_count * half_d) {
                let g = o / half_d;
                let i = o % half_d;
                var a = acc[r] * correction[g];
                for (var j = 0u; j < n; j++) {
                    a += probs[g * MAX_TK + j] * unpack2x16float(tile[j * row + i]);
                }
                acc[r] = a;
            }
        }
        workgroupBarrier(); // the next tile overwrites `tile` and `probs`
    }

    let stride = D + 2u;
    for (var r = 0u; r < OUT_PER_LANE; r++) {
        let o = lid + r * WG;
        if (o < g_count * half_d) {
            let g = o / half_d;
            let i = o % half_d;
            let at = ((t * H + kh * g_count + g) * split.splits + s) * stride + 2u * i;
            scratch[at] = acc[r].x;
            scratch[at + 1u] = acc[r].y;
        }
    }
    if (lid < g_count) {
        let at = ((t * H + kh * g_count + lid) * split.splits + s) * stride + D;
        scratch[at] = run_max[lid];
        scratch[at + 1u] = run_sum[lid];
    }
}

// The same splits for CPU adapters (llvmpipe, SwiftShader), where each barrier of `partial`
// costs more than its tile's arithmetic: every lane takes one (token, query head, split) and
// walks its keys alone, with its query, running max and sum and output in registers. The
// lanes of a workgroup are the heads and splits of one token, so they read the same pages.
const LANES: u32 = 16u;

@compute @workgroup_size(LANES)
fn lanes(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lane = linear_group(wid, nwg) * LANES + lid;
    let per_token = H * split.splits;
    let t = lane / per_token;
    let h = (lane % per_token) / split.splits;
    let s = lane % split.splits;
    let n_keys = params.start_pos + t + 1u;
    let k_begin = s * split.keys_per_split;
    if (t >= params.n_tokens || k_begin >= n_keys) {
        return;
    }
    let k_end = min(k_begin + split.keys_per_split, n_keys);
    let kh = h / (H / HKV);
    let half_d = D / 2u;
    let scale = inverseSqrt(f32(D));
    var qv = array<vec2<f32>, MAX_D / 2u>();
    for (var i = 0u; i < half_d; i++) {
        let qi = (t * H + h) * D + 2u * i;
        qv[i] = vec2<f32>(q[qi], q[qi + 1u]) * scale;
    }
    var acc = array<vec2<f32>, MAX_D / 2u>();
    var m = NEG_BIG;
    var l = 0.0;
    // Four keys a step, so that each query and output pair read from the lane's arrays (which a
    // compiler that does not unroll loops keeps in memory) serves four keys. Keys past the end
    // read the last key and weigh nothing.
    let last = k_end - 1u;
    for (var p = k_begin; p < k_end; p += 4u) {
        let off = vec4<u32>(cache_offset(p, kh), cache_offset(min(p + 1u, last), kh), cache_offset(min(p + 2u, last), kh), cache_offset(min(p + 3u, last), kh));
        var score = vec4<f32>();
        for (var i = 0u; i < half_d; i++) {
            let qi = qv[i];
            score += vec4<f32>(
                dot(unpack2x16float(k_cache[off.x + i]), qi),
                dot(unpack2x16float(k_cache[off.y + i]), qi),
                dot(unpack2x16float(k_cache[off.z + i]), qi),
                dot(unpack2x16float(k_cache[off.w + i]), qi)
            );
        }
        score = select(vec4<f32>(NEG_BIG), score, vec4<u32>(p) + vec4<u32>(0u, 1u, 2u, 3u) <= vec4<u32>(last));
        let m_new = max(m, max(max(score.x, score.y), max(score.z, score.w)));
        let c = exp(m - m_new);
        let w = exp(score - vec4<f32>(m_new));
        l = l * c + (w.x + w.y + w.z + w.w);
        for (var i = 0u; i < half_d; i++) {
            acc[i] = acc[i] * c + w.x * unpack2x16float(v_cache[off.x + i]) + w.y * unpack2x16float(v_cache[off.y + i])
                + w.z * unpack2x16float(v_cache[off.z + i]) + w.w * unpack2x16float(v_cache[off.w + i]);
        }
        m = m_new;
    }
    let stride = D + 2u;
    let at = ((t * H + h) * split.splits + s) * stride;
    for (var i = 0u; i < half_d; i++) {
        scratch[at + 2u * i] = acc[i].x;
        scratch[at + 2u * i + 1u] = acc[i].y;
    }
    scratch[at + D] = m;
    scratch[at + D + 1u] = l;
}

// One workgroup per (query head, token): the splits' outputs rescaled to the common max.
@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y;
    if (t >= params.n_tokens) {
        return;
    }
    let n_keys = params.start_pos + t + 1u;
    let used = (n_keys + split.keys_per_split - 1u) / split.keys_per_split;
    let stride = D + 2u;
    let base = (t * H + h) * split.splits;
    var m = NEG_BIG;
    for (var s = 0u; s < used; s++) {
        m = max(m, scratch[(base + s) * stride + D]);
    }
    var l = 0.0;
    for (var s = 0u; s < used; s++) {
        l += exp(scratch[(base + s) * stride + D] - m) * scratch[(base + s) * stride + D + 1u];
    }
    for (var d = lid; d < D; d += WG) {
        var o = 0.0;
        for (var s = 0u; s < used; s++) {
            o += exp(scratch[(base + s) * stride + D] - m) * scratch[(base + s) * stride + d];
        }
        out[(t * H + h) * D + d] = o / l;
    }
}
