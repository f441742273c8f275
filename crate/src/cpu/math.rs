//! Elementwise math for the CPU kernels, written to vectorise: on wasm32, `f32::exp`, `tanh`,
//! `max` and `round` are calls to libm per value, and a loop of calls runs a value at a time.

use crate::model::config::FfnAct;

/// e^x for x ≤ 0 (Cephes' expf: a degree-6 polynomial on x - n·ln 2, scaled by 2^n; within
/// 2 ulp of the exact value; 0 below -87.3, where f32 leaves its normal range, so masked
/// scores of -inf weigh nothing), branch-free so a loop of it is vectorised.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let below = x < -87.3;
    let x = larger(x, -87.3);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_345e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
    let e = (p * r * r + r) + 1.0;
    // 2^n from n's bits: n + 1.5·2^23 holds n in its low mantissa bits (|n| ≤ 126), which
    // shift into the exponent field; no float-to-int cast, whose saturation does not vectorise.
    let e = e * f32::from_bits(((n + 12_582_912.0).to_bits() << 23).wrapping_add(127 << 23));
    if below {
        0.0
    } else {
        e
    }
}

/// The larger of `a` and `b` (no NaN reaches here), by a compare and select: `f32::max`'s NaN
/// rule has no wasm instruction.
#[inline(always)]
pub fn larger(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `out = act(g) · u` elementwise: the gated FFN's activation, as `FfnAct::apply` defines it,
/// through `exp` of a non-positive argument only (finite inputs).
pub fn gated(act: FfnAct, g: &[f32], u: &[f32], out: &mut [f32]) {
    match act {
        FfnAct::Silu => {
            for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
                // sigmoid(g) = 1 / (1 + e^-g), or e^g / (1 + e^g) for negative g.
                let e = exp(-g.abs());
                let sigmoid = if g >= 0.0 { 1.0 } else { e } / (1.0 + e);
                *o = g * sigmoid * u;
            }
        }
        FfnAct::GeluTanh => {
            for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
                // tanh(y) = sign(y) · (1 - e^-2|y|) / (1 + e^-2|y|).
                let y = 0.797_884_6 * g * (1.0 + 0.044_715 * g * g);
                let e = exp(-2.0 * y.abs());
                let tanh = ((1.0 - e) / (1.0 + e)).copysign(y);
                *o = 0.5 * g * (1.0 + tanh) * u;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let exact = (x as f64).exp();
            worst = worst.max(((exp(x) as f64 - exact) / exact).abs());
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn activations_are_within_a_few_ulp_of_the_exact_values() {
        let g: Vec<f32> = (-200_000..=200_000).map(|i| i as f32 / 5_000.0).collect();
        let u = vec![1f32; g.len()];
        let mut out = vec![0f32; g.len()];
        let exact: [fn(f64) -> f64; 2] = [|g| g / (1.0 + (-g).exp()), |g| 0.5 * g * (1.0 + (0.797_884_560_802_865_4 * (g + 0.044_715 * g * g * g)).tanh())];
        for (act, exact) in [FfnAct::Silu, FfnAct::GeluTanh].into_iter().zip(exact) {
            gated(act, &g, &u, &mut out);
            let worst = g.iter().zip(&out).map(|(&g, &o)| (o as f64 - exact(g as f64)).abs() / (g as f64).abs().max(1e-3)).fold(0.0, f64::max);
            assert!(worst < 1e-6, "{act:?}: error {worst} relative to |g|");
        }
    }
}
