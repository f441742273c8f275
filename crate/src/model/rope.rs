//! RoPE's rotation frequencies: pair i of a head (rows 2i, 2i + 1) turns by pos · freq[i],
//! freq[i] = base^(-2i/D) · freq_scale / factor[i]. `freq_scale` is linear RoPE scaling's
//! 1 / factor (`rope.scaling.type` "linear"); the per-pair factors are Llama 3.x's long-context
//! scaling, stored by the converters as the tensor `rope_freqs.weight` (llama.cpp's
//! `freq_factors`). Computed in f64 so each frequency is one f32 rounding from exact: the
//! angle pos · freq then carries only its own rounding (a GPU's pow is far coarser).

/// The tensor holding Llama 3.x's per-pair frequency divisors, (D / 2) f32.
pub const FACTORS_TENSOR: &str = "rope_freqs.weight";

/// The frequency of each of a head's `head_dim / 2` pairs.
pub fn freqs(head_dim: usize, base: f32, freq_scale: f32, factors: Option<&[f32]>) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| {
            let f = (base as f64).powf(-2.0 * i as f64 / head_dim as f64) * freq_scale as f64;
            let factor = factors.and_then(|fs| fs.get(i)).map_or(1.0, |&v| v as f64);
            (f / factor) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_frequencies_scaled_linearly_and_by_factors() {
        let plain = freqs(8, 10_000.0, 1.0, None);
        assert_eq!(plain, [1.0, 0.1, 0.01, 0.001]);
        assert_eq!(freqs(8, 10_000.0, 0.25, None), [0.25, 0.025, 0.0025, 0.00025]);
        assert_eq!(freqs(8, 10_000.0, 1.0, Some(&[1.0, 2.0, 4.0, 8.0])), [1.0, 0.05, 0.0025, 0.000125]);
    }
}
