//! The CPU reference of KV page quantization (`kv_quant.wgsl` does the same on the GPU).
//!
//! Affine, per group of `group` consecutive values along the head dimension: the group's
//! minimum `m` and step `s = (max − min) / L` are stored as f16 (one u32: `s` low, `m` high),
//! then each value as `q = round((x − m) / s)` clamped to `0..=L`, with `L = 2^bits − 1`, packed
//! little-end first (four per u32 for 8-bit, eight for 4-bit). Decoding is `m + q · s`.
//!
//! Error budget of one value (`error_bound`), from the arithmetic above: rounding to the nearest
//! level costs at most `s/2`; `s` stored as f16 is off by at most 2^-11 relative, which over `L`
//! levels moves the top level by `L · 2^-11 · s` (the clamp catches what passes it); `m` stored
//! as f16 is off by half an f16 ulp of `m`; and the decoded value is rounded to f16 again when
//! it goes back into the pool (half an ulp of the value). K and V are f16 in the pool already,
//! so nothing finer than that last half-ulp is lost by the round trip itself.

use half::f16;

use super::SpillFormat;

/// Quantization of one format and group size: the layout of a page's packed words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantLayout {
    pub format: SpillFormat,
    /// Values per group (divides the head dimension).
    pub group: usize,
}

impl QuantLayout {
    /// Levels above zero: 255 for 8-bit, 15 for 4-bit.
    pub fn levels(&self) -> u32 {
        (1 << self.format.bits()) - 1
    }

    /// u32 words one group takes: its f16 step and minimum, then the packed values.
    pub fn words_per_group(&self) -> usize {
        1 + self.group * self.format.bits() as usize / 32
    }

    /// Bytes `n_values` values take once quantized.
    pub fn bytes_for(&self, n_values: usize) -> usize {
        n_values / self.group * self.words_per_group() * 4
    }

    /// Quantizes `values` (a whole number of groups) into packed words.
    pub fn quantize(&self, values: &[f32]) -> Vec<u32> {
        let mut out = Vec::with_capacity(values.len() / self.group * self.words_per_group());
        let bits = self.format.bits();
        let per_word = (32 / bits) as usize;
        for group in values.chunks_exact(self.group) {
            let (lo, hi) = group.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let step = f16::from_f32((hi - lo) / self.levels() as f32);
            let min = f16::from_f32(lo);
            out.push(u32::from(step.to_bits()) | (u32::from(min.to_bits()) << 16));
            let (step, min) = (step.to_f32(), min.to_f32());
            for chunk in group.chunks_exact(per_word) {
                let mut word = 0u32;
                for (i, &x) in chunk.iter().enumerate() {
                    word |= self.level(x, min, step) << (i as u32 * bits);
                }
                out.push(word);
            }
        }
        out
    }

    /// Decodes packed words back into values, rounded to f16 as the pool stores them.
    pub fn dequantize(&self, words: &[u32]) -> Vec<f32> {
        let bits = self.format.bits();
        let mask = self.levels();
        let mut out = Vec::with_capacity(words.len() / self.words_per_group() * self.group);
        for group in words.chunks_exact(self.words_per_group()) {
            let step = f16::from_bits(group[0] as u16).to_f32();
            let min = f16::from_bits((group[0] >> 16) as u16).to_f32();
            for &word in &group[1..] {
                for i in 0..32 / bits {
                    let q = (word >> (i * bits)) & mask;
                    out.push(f16::from_f32(min + q as f32 * step).to_f32());
                }
            }
        }
        out
    }

    /// The largest round-trip error allowed for a value of a group spanning `lo..=hi` (see the
    /// module comment for where each term comes from).
    pub fn error_bound(&self, lo: f32, hi: f32) -> f32 {
        let step = (hi - lo) / self.levels() as f32;
        let half_ulp = |x: f32| x.abs().max(f32::from(f16::MIN_POSITIVE)) * 2f32.powi(-11);
        step * (0.5 + self.levels() as f32 * 2f32.powi(-11)) * (1.0 + 2f32.powi(-10)) + half_ulp(lo) + half_ulp(lo.abs().max(hi.abs()))
    }

    fn level(&self, x: f32, min: f32, step: f32) -> u32 {
        if step == 0.0 {
            return 0;
        }
        ((x - min) / step).round_ties_even().clamp(0.0, self.levels() as f32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(format: SpillFormat, group: usize) -> QuantLayout {
        QuantLayout { format, group }
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let x = ((state >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 6.0;
                f16::from_f32(x).to_f32()
            })
            .collect()
    }

    #[test]
    fn round_trip_is_within_the_bound_for_each_format() {
        for format in [SpillFormat::Q8, SpillFormat::Q4] {
            for group in [8, 32, 64] {
                let l = layout(format, group);
                let x = values(group * 37, group as u64);
                let words = l.quantize(&x);
                assert_eq!(words.len() * 4, l.bytes_for(x.len()));
                let y = l.dequantize(&words);
                for (i, (g, (a, b))) in x.chunks(group).zip(y.chunks(group)).map(|c| (c.0, c)).enumerate() {
                    let (lo, hi) = g.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                    let bound = l.error_bound(lo, hi);
                    for (j, (p, q)) in a.iter().zip(b).enumerate() {
                        assert!((p - q).abs() <= bound, "{format:?} G={group} group {i} value {j}: {p} → {q}, bound {bound}");
                    }
                }
            }
        }
    }

    #[test]
    fn constant_groups_and_extremes_decode_exactly() {
        let l = layout(SpillFormat::Q8, 8);
        let flat = vec![1.5f32; 8];
        assert_eq!(l.dequantize(&l.quantize(&flat)), flat);
        let ends = [-2.0f32, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let y = l.dequantize(&l.quantize(&ends));
        assert_eq!((y[0], y[1]), (-2.0, 2.0), "the group's minimum and maximum are levels 0 and L");
    }

    #[test]
    fn four_bit_packs_eight_levels_per_word_low_nibble_first() {
        let l = layout(SpillFormat::Q4, 8);
        let x: Vec<f32> = (0..8).map(|i| i as f32 * 15.0 / 7.0).collect();
        let words = l.quantize(&x);
        assert_eq!(words.len(), 2);
        assert_eq!(words[1] & 0xf, 0);
        assert_eq!(words[1] >> 28, 15);
    }
}
