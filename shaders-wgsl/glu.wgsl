// The gated FFN's activation: out = act(gate) * up, elementwise (act.wgsl, as matmul.wgsl's GATED
// epilogue).

override F: u32;            // row length (feed-forward width)
override GELU: bool = false;

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
    out[i] = act4(vec4<f32>(gate[i])).x * up[i];
}
