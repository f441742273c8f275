// KV pages to and from the spill format (kv/spill/quant.rs is the CPU reference): affine
// quantization per group of G values along the head dimension, f16 step and minimum per
// group, BITS per value packed little-end first. One workgroup per group, one lane per value:
// loads and stores of a group are contiguous, and its minimum and maximum come from a
// workgroup reduction. One dispatch covers one layer's K or V (binding `pool`) for a batch of
// pages; the packed words of a page are contiguous across layers, so one page is one record.

override BITS: u32;       // 8 or 4
override G: u32;          // values per group: divides the head, a multiple of 8, at most LANES
override PAGE_VALUES: u32; // values per page of one layer's K or V: page_size · n_kv_heads · head_dim
override N_LK: u32;       // layers × 2 (K and V): the slices of one page's record

const LANES: u32 = 64u;
const BIG: f32 = 3.0e38; // beyond any f16 K/V value, as the reduction's identity

struct SpillParams {
    lk: u32, // which slice of a record this dispatch covers: layer · 2 + (0 for K, 1 for V)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: SpillParams;
@group(0) @binding(1) var<storage, read> batch: array<u32>;           // (1 + pages): count, then page ids
@group(0) @binding(2) var<storage, read_write> pool: array<u32>;      // (pool pages, PAGE_VALUES / 2) f16 pairs
@group(0) @binding(3) var<storage, read_write> packed: array<u32>;    // (batch pages, N_LK, groups, words per group)

var<workgroup> lo: array<f32, 64>;
var<workgroup> hi: array<f32, 64>;
var<workgroup> level: array<u32, 64>;

fn words_per_group() -> u32 {
    return 1u + G * BITS / 32u;
}

// The group this workgroup handles: (batch slot, group within the page), or none past the batch.
struct GroupAt {
    valid: bool,
    first_value: u32, // index of the group's first value in `pool`, in f16 units
    first_word: u32,  // index of the group's header word in `packed`
}

fn group_at(wid: vec3<u32>, nwg: vec3<u32>) -> GroupAt {
    let groups = PAGE_VALUES / G;
    let id = linear_group(wid, nwg);
    let slot = id / groups;
    if (slot >= batch[0]) {
        return GroupAt(false, 0u, 0u);
    }
    let g = id % groups;
    let first_value = batch[1u + slot] * PAGE_VALUES + g * G;
    let first_word = ((slot * N_LK + params.lk) * groups + g) * words_per_group();
    return GroupAt(true, first_value, first_word);
}

fn value_of(i: u32) -> f32 {
    let pair = unpack2x16float(pool[i / 2u]);
    return select(pair.x, pair.y, i % 2u == 1u);
}

@compute @workgroup_size(64)
fn quantize(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lane: u32) {
    let at = group_at(wid, nwg);
    if (!at.valid) {
        return;
    }
    let in_group = lane < G;
    var x = 0.0;
    if (in_group) {
        x = value_of(at.first_value + lane);
    }
    lo[lane] = select(BIG, x, in_group);
    hi[lane] = select(-BIG, x, in_group);
    for (var stride = LANES / 2u; stride > 0u; stride = stride / 2u) {
        workgroupBarrier();
        if (lane < stride) {
            lo[lane] = min(lo[lane], lo[lane + stride]);
            hi[lane] = max(hi[lane], hi[lane + stride]);
        }
    }
    workgroupBarrier();
    let levels = f32((1u << BITS) - 1u);
    // Step and minimum as stored (f16), so levels are computed against what decoding will use.
    let header = pack2x16float(vec2<f32>((hi[0] - lo[0]) / levels, lo[0]));
    let stored = unpack2x16float(header);
    if (in_group) {
        var q = 0.0;
        if (stored.x > 0.0) {
            q = clamp(round((x - stored.y) / stored.x), 0.0, levels);
        }
        level[lane] = u32(q);
    }
    workgroupBarrier();
    let per_word = 32u / BITS;
    let n_words = G / per_word;
    if (lane == 0u) {
        packed[at.first_word] = header;
    }
    if (lane < n_words) {
        var word = 0u;
        for (var i = 0u; i < per_word; i = i + 1u) {
            word = word | (level[lane * per_word + i] << (i * BITS));
        }
        packed[at.first_word + 1u + lane] = word;
    }
}

@compute @workgroup_size(64)
fn dequantize(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lane: u32) {
    let at = group_at(wid, nwg);
    if (!at.valid) {
        return;
    }
    let stored = unpack2x16float(packed[at.first_word]);
    let per_word = 32u / BITS;
    if (lane < G) {
        let word = packed[at.first_word + 1u + lane / per_word];
        let q = (word >> ((lane % per_word) * BITS)) & ((1u << BITS) - 1u);
        hi[lane] = stored.y + f32(q) * stored.x;
    }
    workgroupBarrier();
    if (lane < G / 2u) {
        pool[at.first_value / 2u + lane] = pack2x16float(vec2<f32>(hi[2u * lane], hi[2u * lane + 1u]));
    }
}
