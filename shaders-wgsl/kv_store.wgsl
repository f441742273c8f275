// Writes this step's keys and values into the paged f16 caches: token t goes to position
// p = start_pos + t, slot p % PAGE of page page_table[p / PAGE].

override HKV: u32;       // KV heads
override D: u32;         // head dimension (even)
override PAGE: u32 = 16u; // tokens per page

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read> k: array<f32>;             // (T, HKV, D)
@group(0) @binding(2) var<storage, read> v: array<f32>;             // (T, HKV, D)
@group(0) @binding(3) var<storage, read> page_table: array<u32>;    // (pages of the sequence) page ids
@group(0) @binding(4) var<storage, read_write> k_cache: array<u32>; // (pages, PAGE, HKV, D / 2) f16 pairs
@group(0) @binding(5) var<storage, read_write> v_cache: array<u32>; // (pages, PAGE, HKV, D / 2) f16 pairs

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let pair = linear_group(wid, nwg) * 256u + lid; // over (T, HKV, D / 2)
    let per_token = HKV * D / 2u;
    let t = pair / per_token;
    if (t >= params.n_tokens) {
        return;
    }
    let p = params.start_pos + t;
    let dst = (page_table[p / PAGE] * PAGE + p % PAGE) * per_token + pair % per_token;
    k_cache[dst] = pack2x16float(vec2<f32>(k[2u * pair], k[2u * pair + 1u]));
    v_cache[dst] = pack2x16float(vec2<f32>(v[2u * pair], v[2u * pair + 1u]));
}
