// RoPE, shared by the kernels that rotate q and k (matmul.wgsl's attention-input epilogue,
// qk_norm.wgsl): each declares `rope_freqs`, the model's angle per position for each pair of a
// head (gpu/ops/matmul.rs `RopeTable`).

/// RoPE's angle per position for each pair i of a head, (i / 4, i % 4): gpu/ops/matmul.rs.
struct RopeFreqs {
    f: array<vec4<f32>, 32>, // HEAD_DIM / 2 <= 128
}

/// (a, b) turned by pos · rope_freqs[i].
fn rope(v: vec2<f32>, pos: u32, i: u32) -> vec2<f32> {
    let sc = sin_cos(f32(pos) * rope_freqs.f[i / 4u][i % 4u]);
    return vec2<f32>(v.x * sc.y - v.y * sc.x, v.x * sc.x + v.y * sc.y);
}

/// (sin x, cos x) to a few f32 ulps for |x| below ~5·10^4 (positions to ~50k): WGSL bounds the
/// builtins' error only absolutely, by 2^-11 on [-π, π], and SwiftShader's are that coarse.
/// Cephes' sinf/cosf: x less the nearest multiple j of π/2 (Cody–Waite: π/2 in three parts, the
/// first two short enough that j times them is exact), polynomials on [-π/4, π/4], then the
/// quadrant j mod 4 picks and signs them.
fn sin_cos(x: f32) -> vec2<f32> {
    let j = round(x * 0.636619772);
    let y = ((x - j * 1.5703125) - j * 4.8375129699707031e-4) - j * 7.5497899548918821e-8;
    let z = y * y;
    let s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * y + y;
    let c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    let q = u32(i32(j) & 3);
    let odd = (q & 1u) == 1u;
    let sv = select(s, c, odd);
    let cv = select(c, s, odd);
    return vec2<f32>(select(sv, -sv, q >= 2u), select(cv, -cv, q == 1u || q == 2u));
}
