// Causal grouped-query attention over the paged f16 KV cache, split over the keys
// (flash-decoding): `partial` gives one workgroup to each (key split, KV head, block of TB
// tokens), so a single decoded token over a long cached prefix still spreads over many
// workgroups; `combine` merges each query head's splits. Query t (position start_pos + t) of each
// of the G = H / HKV query heads sharing KV head kh attends positions first_key(start_pos + t)
// ..= start_pos + t (0 ..= for a layer without a sliding window), read through the page table;
// keys before a query's window are never read.
//
// A split of `partial` walks its keys in tiles of TK: the lanes load the tile's keys into
// workgroup memory together (adjacent lanes read adjacent words of a key), score them against
// the block's TB · G queries (its rows: a warm step's new tokens share each tile), update each
// row's running max and sum (online softmax), load the values over the keys and accumulate. Each
// split leaves its unnormalised output, max and sum in `scratch`. `lanes` computes the same
// splits without workgroup memory, for CPU adapters; `decode` those of a single token on GPUs.

override H: u32;          // query heads
override HKV: u32;        // KV heads (divides H, H / HKV <= MAX_G)
override D: u32;          // head dimension (even, <= MAX_D)
override PAGE: u32 = 16u; // tokens per page
override TK: u32;         // keys per tile (gpu/ops/attention_paged.rs tile_keys: TK · (D/2 + 1) <= TILE_WORDS)
override TB: u32;         // tokens per workgroup of `partial` (gpu/ops/attention_paged.rs tokens_per_block)
override SOFTMAX_LANES: u32 = 2u; // lanes per row of `partial`'s softmax: a power of two, SOFTMAX_LANES · TB · G <= WG (softmax_lanes)
override WINDOW: u32 = 0u; // a sliding-window layer's positions per query, its own included; 0: every position
override SCALE: f32;       // q·k's scale: 1/sqrt(D) for most models

struct SplitParams {
    keys_per_split: u32, // a multiple of TK
    splits: u32,         // splits per (token, head) in `scratch`
    first: u32,          // the key split 0 starts at: first_key(start_pos), the step's lowest
    _pad: u32,
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
const MAX_ROWS: u32 = 32u;    // gpu/ops/attention_paged.rs MAX_BLOCK_ROWS: (token, query head) rows of `partial`
const PROB_WORDS: u32 = 768u; // gpu/ops/attention_paged.rs PROB_WORDS: rows × TK of `partial`'s scores
const TILE_WORDS: u32 = 1040u; // gpu/ops/attention_paged.rs TILE_WORDS: 16 keys of D = 128, 8 of D = 256
const OUT_PER_LANE: u32 = MAX_G * MAX_D / 2u / WG;
const NEG_BIG: f32 = -3.40282346e38; // a finite -inf: exp(NEG_BIG - m) is 0 without inf - inf

// 8 KiB + 4160 B + 3 KiB + 640 B, under WebGPU's 16 KiB of workgroup storage. A block's rows
// hold at most MAX_G · MAX_D / D queries and PROB_WORDS / TK scores a tile: the smaller the
// head, the more tokens share each tile of keys and values.
var<workgroup> qs: array<vec2<f32>, MAX_G * MAX_D / 2u>; // [r][i] the rows' (or decode's heads') queries, pre-scaled by 1/sqrt(D)
var<workgroup> tile: array<u32, TILE_WORDS>;              // [j][i] a tile's keys, then its values (rows padded by a word)
var<workgroup> probs: array<f32, PROB_WORDS>;             // [r][j] scores, then exp(score - running max)
var<workgroup> lane_max: array<f32, WG>;                  // [r][p] `partial`'s softmax lane p's max over row r's keys
var<workgroup> lane_sum: array<f32, WG>;                  // [r][p] its running sum (at the end)
var<workgroup> correction: array<f32, MAX_ROWS>;

// The first position a query at position `pos` sees.
fn first_key(pos: u32) -> u32 {
    return select(0u, pos + 1u - WINDOW, WINDOW != 0u && pos >= WINDOW);
}

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
    let t0 = wid.z * TB;
    let g_count = H / HKV;
    // Uniform per workgroup: tokens past the batch, or a split past every row's keys.
    if (t0 >= params.n_tokens) {
        return;
    }
    let n_rows = min(TB, params.n_tokens - t0) * g_count;
    let k_split = split.first + s * split.keys_per_split;
    let keys_of_last = params.start_pos + t0 + (n_rows - 1u) / g_count + 1u;
    let k_end = min(k_split + split.keys_per_split, keys_of_last);
    // Keys before the first row's window no row sees; a split that holds none of the block's
    // keys is never read by the combine.
    let k_begin = max(k_split, first_key(params.start_pos + t0));
    if (k_begin >= k_end) {
        return;
    }
    let half_d = D / 2u;
    let row = half_d + 1u;
    let scale = SCALE;
    for (var e = lid; e < n_rows * half_d; e += WG) {
        let qi = row_query(kh, t0 * g_count + e / half_d) + 2u * (e % half_d);
        qs[e] = vec2<f32>(q[qi], q[qi + 1u]) * scale;
    }
    // The softmax: lane p of the SOFTMAX_LANES lanes of row sr = lid / SOFTMAX_LANES takes keys p,
    // p + SOFTMAX_LANES, … of each tile. Each keeps the row's running max (the same on all its
    // lanes) and its own keys' running sum.
    let sr = lid / SOFTMAX_LANES;
    let sp = lid % SOFTMAX_LANES;
    var m_run = NEG_BIG;
    var sum_run = 0.0;
    // Rows go in quads, so that each read of a key or value pair serves four rows (the last
    // quad's rows past n_rows compute what is never stored; TB · G rounded up to quads fits
    // every array).
    let n_quads = (n_rows + 3u) / 4u;
    // Output pair i of quad rows 4m .. 4m + 3 for entries m · half_d + i = lid, lid + WG, …:
    // entry u's rows in acc[4u] .. acc[4u + 3].
    var acc = array<vec2<f32>, OUT_PER_LANE>();
    workgroupBarrier();

    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        let n = min(TK, k_end - k0);
        load_tile(true, k0, n, kh, lid);
        workgroupBarrier();
        for (var e = lid; e < n_quads * TK; e += WG) {
            let r0 = e / TK * 4u;
            let j = e % TK;
            // Row r's token attends keys first_key(pos) ..= pos, pos = start_pos + t0 + r / G. A
            // row none of whose keys are in this split leaves values the combine never reads;
            // tiles before a row's first key weigh nothing once its max is a real score. The
            // quad's rows together see first_key(their first pos) ..= their last pos.
            let pos0 = params.start_pos + t0 + r0 / g_count;
            let pos3 = params.start_pos + t0 + min(r0 + 3u, n_rows - 1u) / g_count;
            let key = k0 + j;
            var sc = vec4<f32>();
            if (j < n && key <= pos3 && key >= first_key(pos0)) {
                let at = r0 * half_d;
                for (var i = 0u; i < half_d; i++) {
                    let kv = unpack2x16float(tile[j * row + i]);
                    sc += vec4<f32>(dot(kv, qs[at + i]), dot(kv, qs[at + half_d + i]), dot(kv, qs[at + 2u * half_d + i]), dot(kv, qs[at + 3u * half_d + i]));
                }
            }
            for (var u = 0u; u < 4u; u++) {
                let r = r0 + u;
                let pos = params.start_pos + t0 + r / g_count;
                if (r < n_rows) {
                    probs[r * TK + j] = select(NEG_BIG, sc[u], j < n && key <= pos && key >= first_key(pos));
                }
            }
        }
        workgroupBarrier();
        if (sr < n_rows) {
            var m = NEG_BIG;
            for (var j = sp; j < n; j += SOFTMAX_LANES) {
                m = max(m, probs[sr * TK + j]);
            }
            lane_max[lid] = m;
        }
        workgroupBarrier();
        if (sr < n_rows) {
            var m_new = m_run;
            for (var p = 0u; p < SOFTMAX_LANES; p++) {
                m_new = max(m_new, lane_max[sr * SOFTMAX_LANES + p]);
            }
            var sum = 0.0;
            for (var j = sp; j < n; j += SOFTMAX_LANES) {
                let p = exp(probs[sr * TK + j] - m_new);
                probs[sr * TK + j] = p;
                sum += p;
            }
            let c = exp(m_run - m_new);
            if (sp == 0u) {
                correction[sr] = c;
            }
            sum_run = sum_run * c + sum;
            m_run = m_new;
        }
        load_tile(false, k0, n, kh, lid); // the keys are scored: the tile takes the values
        workgroupBarrier();
        for (var u = 0u; u < OUT_PER_LANE / 4u; u++) {
            let e = lid + u * WG;
            if (e < n_quads * half_d) {
                let r0 = e / half_d * 4u;
                let i = e % half_d;
                var a0 = acc[4u * u] * correction[r0];
                var a1 = acc[4u * u + 1u] * correction[r0 + 1u];
                var a2 = acc[4u * u + 2u] * correction[r0 + 2u];
                var a3 = acc[4u * u + 3u] * correction[r0 + 3u];
                for (var j = 0u; j < n; j++) {
                    let v = unpack2x16float(tile[j * row + i]);
                    a0 += probs[r0 * TK + j] * v;
                    a1 += probs[(r0 + 1u) * TK + j] * v;
                    a2 += probs[(r0 + 2u) * TK + j] * v;
                    a3 += probs[(r0 + 3u) * TK + j] * v;
                }
                acc[4u * u] = a0;
                acc[4u * u + 1u] = a1;
                acc[4u * u + 2u] = a2;
                acc[4u * u + 3u] = a3;
            }
        }
        workgroupBarrier(); // the next tile overwrites `tile`, `probs` and `lane_max`
    }
    if (sr < n_rows) {
        lane_max[lid] = m_run;
        lane_sum[lid] = sum_run;
    }
    workgroupBarrier();

    // Row r is query head kh·G + r % G of token t0 + r / G.
    for (var u = 0u; u < OUT_PER_LANE / 4u; u++) {
        let e = lid + u * WG;
        let i = e % half_d;
        for (var v = 0u; v < 4u; v++) {
            let r = e / half_d * 4u + v;
            if (e < n_quads * half_d && r < n_rows) {
                store_split_pair(row_head(kh, t0 * g_count + r), s, i, acc[4u * u + v], row_sum(r));
            }
        }
    }
    if (lid < n_rows) {
        let r = lid;
        store_split_stats(row_head(kh, t0 * g_count + r), s, lane_max[r * SOFTMAX_LANES], row_sum(r));
    }
}

/// Row r's softmax sum over the split, from its lanes' sums at the end of `partial`.
fn row_sum(r: u32) -> f32 {
    var sum = 0.0;
    for (var p = 0u; p < SOFTMAX_LANES; p++) {
        sum += lane_sum[r * SOFTMAX_LANES + p];
    }
    return sum;
}

// Split s's unnormalised output pair i of (token, query head) th, whose softmax sum is `sum`:
// into `scratch` for `combine`, or, when the step's keys are one split, normalised straight into
// `out` (then no `combine` runs: gpu/ops/attention_paged.rs encode).
fn store_split_pair(th: u32, s: u32, i: u32, pair: vec2<f32>, sum: f32) {
    if (split.splits == 1u) {
        out[th * D + 2u * i] = pair.x / sum;
        out[th * D + 2u * i + 1u] = pair.y / sum;
        return;
    }
    let at = (th * split.splits + s) * (D + 2u) + 2u * i;
    scratch[at] = pair.x;
    scratch[at + 1u] = pair.y;
}

// Split s's running max and sum for `combine` (none with one split).
fn store_split_stats(th: u32, s: u32, m: f32, l: f32) {
    if (split.splits > 1u) {
        let at = (th * split.splits + s) * (D + 2u) + D;
        scratch[at] = m;
        scratch[at + 1u] = l;
    }
}

// ---- One token on GPUs: `decode` ----
//
// A decoded token's split of at most DEC_KEYS keys in two passes: each lane scores keys lid,
// lid + WG, … for the G query heads of its KV head (straight from the cache, each key's words by
// one lane) keeping its own maximum per head; every head's maximum comes from the lanes' in two
// steps; each lane turns its own scores into probabilities; then lanes take output pairs and walk
// the split's values (adjacent lanes adjacent words of a value row) and probabilities, adding the
// probabilities as they go. Four barriers a split and the softmax on every lane, where `partial`
// has five a tile of at most 32 keys and its softmax on SOFTMAX_LANES lanes a row. A token
// whose keys are one split writes its output here: no `combine`.
const DEC_KEYS: u32 = 128u; // gpu/ops/attention_paged.rs DECODE_SPLIT_KEYS

// 4 KiB + 2 KiB + 256 B beside `qs`.
var<workgroup> dec_p: array<f32, MAX_G * DEC_KEYS>; // [g][j] scores, then exp(score - max)
var<workgroup> dec_lane_max: array<f32, MAX_G * WG>; // [g][lane] each lane's maximum
var<workgroup> dec_max8: array<f32, MAX_G * 8u>;     // [g][i] the maximum of lanes 8i .. 8i + 7

@compute @workgroup_size(WG)
fn decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = wid.x;
    let kh = wid.y;
    let g_count = H / HKV;
    let pos = params.start_pos;
    let k_begin = max(split.first + s * split.keys_per_split, first_key(pos));
    let k_end = min(split.first + (s + 1u) * split.keys_per_split, pos + 1u);
    if (k_begin >= k_end) {
        return; // uniform: a split past the token's keys, never read by the combine
    }
    let n = k_end - k_begin; // at most DEC_KEYS
    let half_d = D / 2u;
    for (var e = lid; e < g_count * half_d; e += WG) {
        let qi = (kh * g_count + e / half_d) * D + 2u * (e % half_d);
        qs[e] = vec2<f32>(q[qi], q[qi + 1u]) * SCALE;
    }
    workgroupBarrier();
    var m = array<f32, MAX_G>();
    for (var g = 0u; g < g_count; g++) {
        m[g] = NEG_BIG;
    }
    for (var j = lid; j < n; j += WG) {
        let at = cache_offset(k_begin + j, kh);
        var sc = array<f32, MAX_G>();
        for (var i = 0u; i < half_d; i++) {
            let kv = unpack2x16float(k_cache[at + i]);
            for (var g = 0u; g < g_count; g++) {
                sc[g] += dot(kv, qs[g * half_d + i]);
            }
        }
        for (var g = 0u; g < g_count; g++) {
            dec_p[g * DEC_KEYS + j] = sc[g];
            m[g] = max(m[g], sc[g]);
        }
    }
    for (var g = 0u; g < g_count; g++) {
        dec_lane_max[g * WG + lid] = m[g];
    }
    workgroupBarrier();
    if (lid < g_count * 8u) {
        var m8 = NEG_BIG;
        for (var l = 0u; l < 8u; l++) {
            m8 = max(m8, dec_lane_max[lid / 8u * WG + lid % 8u * 8u + l]);
        }
        dec_max8[lid] = m8;
    }
    workgroupBarrier();
    for (var g = 0u; g < g_count; g++) {
        m[g] = NEG_BIG;
        for (var i = 0u; i < 8u; i++) {
            m[g] = max(m[g], dec_max8[g * 8u + i]);
        }
    }
    for (var j = lid; j < n; j += WG) {
        for (var g = 0u; g < g_count; g++) {
            dec_p[g * DEC_KEYS + j] = exp(dec_p[g * DEC_KEYS + j] - m[g]);
        }
    }
    workgroupBarrier();
    for (var u = 0u; u < OUT_PER_LANE; u++) {
        let o = lid + u * WG;
        if (o < g_count * half_d) {
            let g = o / half_d;
            let i = o % half_d;
            var a = vec2<f32>();
            var l = 0.0;
            for (var j = 0u; j < n; j++) {
                let p = dec_p[g * DEC_KEYS + j];
                a += p * unpack2x16float(v_cache[cache_offset(k_begin + j, kh) + i]);
                l += p;
            }
            store_split_pair(row_head(kh, g), s, i, a, l);
            if (i == 0u) {
                store_split_stats(row_head(kh, g), s, m[g], l);
            }
        }
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
    let pos = params.start_pos + t;
    let k_split = split.first + s * split.keys_per_split;
    let k_begin = max(k_split, first_key(pos));
    let k_end = min(k_split + split.keys_per_split, pos + 1u);
    if (t >= params.n_tokens || k_begin >= k_end) {
        return;
    }
    let kh = h / (H / HKV);
    let half_d = D / 2u;
    let scale = SCALE;
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
    for (var i = 0u; i < half_d; i++) {
        store_split_pair(t * H + h, s, i, acc[i], l);
    }
    store_split_stats(t * H + h, s, m, l);
}

// One workgroup per (query head, token): the splits' outputs rescaled to the common max.
@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y;
    if (t >= params.n_tokens) {
        return;
    }
    // The splits holding this query's keys: from its window's first to its own position.
    let pos = params.start_pos + t;
    let first_split = (first_key(pos) - split.first) / split.keys_per_split;
    let used = (pos + 1u - split.first + split.keys_per_split - 1u) / split.keys_per_split;
    let stride = D + 2u;
    let base = (t * H + h) * split.splits;
    var m = NEG_BIG;
    for (var s = first_split; s < used; s++) {
        m = max(m, scratch[(base + s) * stride + D]);
    }
    var l = 0.0;
    for (var s = first_split; s < used; s++) {
        l += exp(scratch[(base + s) * stride + D] - m) * scratch[(base + s) * stride + D + 1u];
    }
    for (var d = lid; d < D; d += WG) {
        var o = 0.0;
        for (var s = first_split; s < used; s++) {
            o += exp(scratch[(base + s) * stride + D] - m) * scratch[(base + s) * stride + d];
        }
        out[(t * H + h) * D + d] = o / l;
    }
}

// ---- Rows: a step of several tokens as two products, for CPU adapters ----
//
// `lanes` gives each query its own walk over the keys, so a warm step (dozens of new tokens over
// a long cached prefix) gathers every key once per query. Here the step's queries share them, as
// a matrix product does: `rows_scores` computes the score matrix, each lane 4 query rows × 8 keys
// in named vectors (as matmul_rows); `rows_softmax` turns each row into probabilities; `rows_pv`
// multiplies them by the values, each lane 4 rows × 8 dimensions. For KV head kh, row r = t·G + g
// is query head kh·G + g of token t (G = H / HKV); rows are padded to a multiple of 4. `scratch`
// holds S[kh][j][r] for the step's NK = start_pos + n_tokens keys, then 1 / sum per (kh, r).
// (gpu/ops/attention_paged.rs rows_scratch_words.)
const ROW_LANES: u32 = 16u;

var<private> s0: vec4<f32>;
var<private> s1: vec4<f32>;
var<private> s2: vec4<f32>;
var<private> s3: vec4<f32>;
var<private> s4: vec4<f32>;
var<private> s5: vec4<f32>;
var<private> s6: vec4<f32>;
var<private> s7: vec4<f32>;

fn clear_sums() {
    s0 = vec4<f32>();
    s1 = vec4<f32>();
    s2 = vec4<f32>();
    s3 = vec4<f32>();
    s4 = vec4<f32>();
    s5 = vec4<f32>();
    s6 = vec4<f32>();
    s7 = vec4<f32>();
}

fn rows_count() -> u32 {
    return (H / HKV) * params.n_tokens;
}

fn rows_stride() -> u32 {
    return (rows_count() + 3u) & ~3u;
}

fn rows_keys() -> u32 {
    return params.start_pos + params.n_tokens;
}

// Row r of KV head kh's rows (token r / G, query head kh·G + r % G) as token · H + query head.
fn row_head(kh: u32, r: u32) -> u32 {
    let g_count = H / HKV;
    return (r / g_count) * H + kh * g_count + r % g_count;
}

// Where row r's query for KV head kh begins in q.
fn row_query(kh: u32, r: u32) -> u32 {
    return row_head(kh, r) * D;
}

// Row r attends keys row_first(r) .. row_keys(r).
fn row_keys(r: u32) -> u32 {
    return params.start_pos + r / (H / HKV) + 1u;
}

fn row_first(r: u32) -> u32 {
    return first_key(params.start_pos + r / (H / HKV));
}

// Where the 1 / sum of row r of KV head kh is kept.
fn row_inverse_sum(kh: u32, r: u32) -> u32 {
    return (HKV * rows_keys() + kh) * rows_stride() + r;
}

fn query4(at: u32) -> vec4<f32> {
    return vec4<f32>(q[at], q[at + 1u], q[at + 2u], q[at + 3u]);
}

fn key4(at: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(k_cache[at]), unpack2x16float(k_cache[at + 1u]));
}

fn value4(at: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(v_cache[at]), unpack2x16float(v_cache[at + 1u]));
}

fn store4(at: u32, v: vec4<f32>) {
    scratch[at] = v.x;
    scratch[at + 1u] = v.y;
    scratch[at + 2u] = v.z;
    scratch[at + 3u] = v.w;
}

// Lane (kh, key block, row block): rows r0 .. r0 + 3 against keys j0 .. j0 + 7. Rows and keys
// past the end are clamped for loading; keys past the end are never stored.
@compute @workgroup_size(ROW_LANES)
fn rows_scores(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lane = linear_group(wid, nwg) * ROW_LANES + lid;
    let rs = rows_stride();
    let row_blocks = rs / 4u;
    let nk = rows_keys();
    let key_blocks = (nk + 7u) / 8u;
    let r0 = (lane % row_blocks) * 4u;
    let j0 = (lane / row_blocks % key_blocks) * 8u;
    let kh = lane / row_blocks / key_blocks;
    let last_row = min(r0 + 3u, rows_count() - 1u);
    // Uniform enough: keys no row of the block attends to are never read.
    if (kh >= HKV || j0 >= row_keys(last_row) || j0 + 8u <= row_first(r0)) {
        return;
    }
    let qr = vec4<u32>(row_query(kh, r0), row_query(kh, min(r0 + 1u, last_row)), row_query(kh, min(r0 + 2u, last_row)), row_query(kh, last_row));
    let jl = nk - 1u;
    let ka = vec4<u32>(cache_offset(j0, kh), cache_offset(min(j0 + 1u, jl), kh), cache_offset(min(j0 + 2u, jl), kh), cache_offset(min(j0 + 3u, jl), kh));
    let kb = vec4<u32>(cache_offset(min(j0 + 4u, jl), kh), cache_offset(min(j0 + 5u, jl), kh), cache_offset(min(j0 + 6u, jl), kh), cache_offset(min(j0 + 7u, jl), kh));
    clear_sums();
    for (var i = 0u; i < D; i += 4u) {
        let w = i / 2u;
        // Columns are keys: a row's query times the matrix is its four scores.
        let ca = mat4x4<f32>(key4(ka.x + w), key4(ka.y + w), key4(ka.z + w), key4(ka.w + w));
        let cb = mat4x4<f32>(key4(kb.x + w), key4(kb.y + w), key4(kb.z + w), key4(kb.w + w));
        let q0 = query4(qr.x + i);
        let q1 = query4(qr.y + i);
        let q2 = query4(qr.z + i);
        let q3 = query4(qr.w + i);
        s0 += q0 * ca;
        s1 += q1 * ca;
        s2 += q2 * ca;
        s3 += q3 * ca;
        s4 += q0 * cb;
        s5 += q1 * cb;
        s6 += q2 * cb;
        s7 += q3 * cb;
    }
    // Transposed, column c holds key c's scores for the four rows: one store of 4 per key.
    let scale = SCALE;
    let ta = transpose(mat4x4<f32>(s0, s1, s2, s3)) * scale;
    let tb = transpose(mat4x4<f32>(s4, s5, s6, s7)) * scale;
    let at = (kh * nk + j0) * rs + r0;
    store4(at, ta[0]);
    if (j0 + 1u < nk) { store4(at + rs, ta[1]); }
    if (j0 + 2u < nk) { store4(at + 2u * rs, ta[2]); }
    if (j0 + 3u < nk) { store4(at + 3u * rs, ta[3]); }
    if (j0 + 4u < nk) { store4(at + 4u * rs, tb[0]); }
    if (j0 + 5u < nk) { store4(at + 5u * rs, tb[1]); }
    if (j0 + 6u < nk) { store4(at + 6u * rs, tb[2]); }
    if (j0 + 7u < nk) { store4(at + 7u * rs, tb[3]); }
}

// Lane (kh, r): row r's scores over the keys it attends to become exp(score - max), the rest 0
// (before its window, from the step's first key on: what `rows_pv` reads), and its 1 / sum is
// kept. Padding rows become 0.
@compute @workgroup_size(ROW_LANES)
fn rows_softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lane = linear_group(wid, nwg) * ROW_LANES + lid;
    let rs = rows_stride();
    let kh = lane / rs;
    let r = lane % rs;
    if (kh >= HKV) {
        return;
    }
    let nk = rows_keys();
    let base = kh * nk * rs + r;
    let n = select(0u, row_keys(r), r < rows_count());
    let lo = min(row_first(r), n);
    for (var j = first_key(params.start_pos); j < lo; j++) {
        scratch[base + j * rs] = 0.0;
    }
    var m = NEG_BIG;
    for (var j = lo; j < n; j++) {
        m = max(m, scratch[base + j * rs]);
    }
    var l = 0.0;
    for (var j = lo; j < n; j++) {
        let p = exp(scratch[base + j * rs] - m);
        scratch[base + j * rs] = p;
        l += p;
    }
    for (var j = n; j < nk; j++) {
        scratch[base + j * rs] = 0.0;
    }
    scratch[row_inverse_sum(kh, r)] = select(0.0, 1.0 / l, n > lo);
}

// out for row r of KV head kh, dimensions d0 .. d0 + 7.
fn store_row(kh: u32, r: u32, d0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    let at = row_query(kh, r) + d0;
    let inv = scratch[row_inverse_sum(kh, r)];
    out[at] = lo.x * inv;
    out[at + 1u] = lo.y * inv;
    out[at + 2u] = lo.z * inv;
    out[at + 3u] = lo.w * inv;
    out[at + 4u] = hi.x * inv;
    out[at + 5u] = hi.y * inv;
    out[at + 6u] = hi.z * inv;
    out[at + 7u] = hi.w * inv;
}

// Lane (kh, row block, dimension block): rows r0 .. r0 + 3, dimensions d0 .. d0 + 7, summed over
// the keys the block's last row attends to (the others' probabilities are 0 past their own).
@compute @workgroup_size(ROW_LANES)
fn rows_pv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lane = linear_group(wid, nwg) * ROW_LANES + lid;
    let rs = rows_stride();
    let dim_blocks = D / 8u;
    let d0 = (lane % dim_blocks) * 8u;
    let r0 = (lane / dim_blocks % (rs / 4u)) * 4u;
    let kh = lane / dim_blocks / (rs / 4u);
    let n_rows = rows_count();
    if (kh >= HKV || r0 >= n_rows) {
        return;
    }
    let last_row = min(r0 + 3u, n_rows - 1u);
    let n = row_keys(last_row);
    let j0 = row_first(r0);
    clear_sums();
    // s_c[i]: row i's sum for dimension d0 + c.
    var at = (kh * rows_keys() + j0) * rs + r0;
    for (var j = j0; j < n; j++) {
        let p = vec4<f32>(scratch[at], scratch[at + 1u], scratch[at + 2u], scratch[at + 3u]);
        at += rs;
        let w = cache_offset(j, kh) + d0 / 2u;
        let lo = value4(w);
        let hi = value4(w + 2u);
        s0 += p * lo.x;
        s1 += p * lo.y;
        s2 += p * lo.z;
        s3 += p * lo.w;
        s4 += p * hi.x;
        s5 += p * hi.y;
        s6 += p * hi.z;
        s7 += p * hi.w;
    }
    // Transposed, column i holds row i's dimensions.
    let lo = transpose(mat4x4<f32>(s0, s1, s2, s3));
    let hi = transpose(mat4x4<f32>(s4, s5, s6, s7));
    store_row(kh, r0, d0, lo[0], hi[0]);
    if (r0 + 1u < n_rows) { store_row(kh, r0 + 1u, d0, lo[1], hi[1]); }
    if (r0 + 2u < n_rows) { store_row(kh, r0 + 2u, d0, lo[2], hi[2]); }
    if (r0 + 3u < n_rows) { store_row(kh, r0 + 3u, d0, lo[3], hi[3]); }
}
