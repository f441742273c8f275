// The gated FFN's activation: out = act(gate) * up, elementwise; act is SiLU (SwiGLU) or GELU's
// tanh approximation (GeGLU: gemma3), as matmul.wgsl's GATED epilogue.

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
    let g = gate[i];
    var a = g / (1.0 + exp(-g));
    if (GELU) {
        // tanh's argument clamped: tanh(10) is 1 in f32, and exp-based tanh overflows beyond.
        a = 0.5 * g * (1.0 + tanh(clamp(0.7978845608 * g * (1.0 + 0.044715 * g * g), -10.0, 10.0)));
    }
    out[i] = a * up[i];
}
