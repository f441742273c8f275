// SwiGLU: out = silu(gate) * up, elementwise.

override F: u32; // row length (feed-forward width)

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read> gate: array<f32>;      // (T, F)
@group(0) @binding(2) var<storage, read> up: array<f32>;        // (T, F)
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (T, F)

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wid, nwg) * 256u + lid;
    if (i >= params.n_tokens * F) {
        return;
    }
    let g = gate[i];
    out[i] = g / (1.0 + exp(-g)) * up[i];
}
