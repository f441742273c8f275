// Rotary position embedding in place, llama.cpp's "normal" mode: the adjacent pair
// (x[2i], x[2i+1]) of each head rotates by pos · BASE^(-2i/D), pos = start_pos + t.

override H: u32;    // heads
override D: u32;    // head dimension (even)
override BASE: f32; // rope frequency base

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // (T, H, D)

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let pair = linear_group(wid, nwg) * 256u + lid; // over (T, H, D / 2)
    let i = pair % (D / 2u);
    let t = pair / (D / 2u) / H;
    if (t >= params.n_tokens) {
        return;
    }
    let theta = f32(params.start_pos + t) * pow(BASE, -2.0 * f32(i) / f32(D));
    // WGSL only bounds sin/cos error on [-π, π], and positions reach thousands of radians:
    // reduce by 2π in two parts (Cody–Waite; 6.28125 has 8 significant bits, so n · 6.28125 is
    // exact for n < 2^16, i.e. angles below ~4·10^5).
    let n = round(theta * 0.15915494);
    let r = (theta - n * 6.28125) - n * 1.9353072e-3;
    let c = cos(r);
    let s = sin(r);
    let a = x[2u * pair];
    let b = x[2u * pair + 1u];
    x[2u * pair] = a * c - b * s;
    x[2u * pair + 1u] = a * s + b * c;
}
