//! The thin SIMD layer the CPU kernels are written against: a block of 32 bytes (one
//! quantization block of weights, unpacked from its format with byte operations), the block
//! widened to 16-bit integers, its dot product with 32 activations quantized to 16 bits, as
//! partial sums kept apart by half (Q6_K changes scale every 16 weights), and 8-lane f32
//! accumulators. Each kernel is one generic function over [`Simd`]; [`Native`] is the best
//! implementation the build target offers (AVX2 on x86-64-v3, NEON on aarch64, simd128 on wasm) and
//! [`Scalar`] is the plain twin the tests compare it with.
//!
//! The byte operations follow llama.cpp's ggml-cpu (`bytes_from_nibbles_32`,
//! `bytes_from_bits_32`, `mul_sum_i8_pairs`) and candle's simd128 k-quants.

/// One target's vector operations. Every method is `#[inline(always)]` so a kernel compiles to
/// straight vector code with no calls.
pub trait Simd: Copy + Send + Sync + 'static {
    /// 32 bytes, read as i8 or u8 by the operation.
    type B: Copy;
    /// 32 weights as i16, widened once and used for every token.
    type W: Copy;
    /// Partial sums of a 32-weight dot product: those of weights 0..16 apart from 16..32.
    type D: Copy;
    /// An f32 accumulator of 8 lanes.
    type F: Copy;

    fn load(bytes: &[u8; 32]) -> Self::B;
    /// The 32 nibbles of 16 bytes: low nibbles in bytes 0..16, high nibbles in 16..32.
    fn nibbles(bytes: &[u8; 16]) -> Self::B;
    /// 0xFF in byte j where bit j of `bits` is set, else 0.
    fn bit_mask(bits: u32) -> Self::B;
    fn and(a: Self::B, mask: u8) -> Self::B;
    fn or(a: Self::B, b: Self::B) -> Self::B;
    /// Each byte shifted right by `n`, zeros in.
    fn shr(a: Self::B, n: u32) -> Self::B;
    /// Each byte shifted left by `n`.
    fn shl(a: Self::B, n: u32) -> Self::B;
    /// Each byte minus `v` (wrapping).
    fn sub(a: Self::B, v: u8) -> Self::B;
    /// The bytes as signed i8, widened to i16.
    fn widen(a: Self::B) -> Self::W;
    /// `w · a` over the 32 pairs, summed by half. Each product and pair sum fits i32.
    fn dot(w: Self::W, a: &[i16; 32]) -> Self::D;

    fn zero() -> Self::F;
    /// `acc + (sum of d) · s`.
    fn fma(acc: Self::F, d: Self::D, s: f32) -> Self::F;
    /// `acc + (sum of d's first half) · s0 + (sum of its second half) · s1`.
    fn fma2(acc: Self::F, d: Self::D, s0: f32, s1: f32) -> Self::F;
    fn sum(acc: Self::F) -> f32;

    /// `acc + a[0..8] · b[0..8]`, elementwise.
    fn fmul_add(acc: Self::F, a: &[f32; 8], b: &[f32; 8]) -> Self::F;
    /// `y[0..8] += a · x[0..8]`.
    fn axpy(y: &mut [f32; 8], a: f32, x: &[f32; 8]);
    /// Eight f16 values (as bits) to f32.
    fn f16_to_f32(src: &[u16; 8], dst: &mut [f32; 8]);

    /// The accumulator type as a value of its own, for register tiles (attention's).
    fn splat(x: f32) -> Self::F;
    fn loadf(a: &[f32; 8]) -> Self::F;
    fn storef(v: Self::F, out: &mut [f32; 8]);
    /// `acc + a · b`, elementwise.
    fn fmadd(acc: Self::F, a: Self::F, b: Self::F) -> Self::F;
    /// `a + b` and `a · b`, elementwise.
    fn addf(a: Self::F, b: Self::F) -> Self::F;
    fn mulf(a: Self::F, b: Self::F) -> Self::F;

    /// Attention's integer products: an i32 accumulator of 8 lanes.
    type I: Copy;
    fn zeroi() -> Self::I;
    /// Lane j plus `w[0]·b[2j] + w[1]·b[2j+1]` (two weights over interleaved rows).
    fn dot_pair_splat(acc: Self::I, w: [i16; 2], b: &[i16; 16]) -> Self::I;
    fn to_f32(a: Self::I) -> Self::F;
    /// Lane-wise `max(acc, |x|)`, and the largest lane.
    fn abs_max(acc: Self::F, x: Self::F) -> Self::F;
    fn hmax(a: Self::F) -> f32;
    /// `x · inv`, rounded to nearest (ties to even), as i16 (within its range by the caller).
    fn to_i16(x: Self::F, inv: Self::F) -> [i16; 8];
    /// `a[0], b[0], a[1], b[1], ...`.
    fn interleave(a: [i16; 8], b: [i16; 8], out: &mut [i16; 16]);
}

/// The plain twin: the same operations one lane at a time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

impl Simd for Scalar {
    type B = [u8; 32];
    type W = [i16; 32];
    type D = [i32; 2];
    type F = [f32; 8];

    #[inline(always)]
    fn load(bytes: &[u8; 32]) -> Self::B {
        *bytes
    }
    #[inline(always)]
    fn nibbles(bytes: &[u8; 16]) -> Self::B {
        std::array::from_fn(|j| if j < 16 { bytes[j] & 0x0f } else { bytes[j - 16] >> 4 })
    }
    #[inline(always)]
    fn bit_mask(bits: u32) -> Self::B {
        std::array::from_fn(|j| if bits >> j & 1 == 1 { 0xff } else { 0 })
    }
    #[inline(always)]
    fn and(a: Self::B, mask: u8) -> Self::B {
        a.map(|x| x & mask)
    }
    #[inline(always)]
    fn or(a: Self::B, b: Self::B) -> Self::B {
        std::array::from_fn(|j| a[j] | b[j])
    }
    #[inline(always)]
    fn shr(a: Self::B, n: u32) -> Self::B {
        a.map(|x| x >> n)
    }
    #[inline(always)]
    fn shl(a: Self::B, n: u32) -> Self::B {
        a.map(|x| x << n)
    }
    #[inline(always)]
    fn sub(a: Self::B, v: u8) -> Self::B {
        a.map(|x| x.wrapping_sub(v))
    }
    #[inline(always)]
    fn widen(a: Self::B) -> Self::W {
        a.map(|x| x as i8 as i16)
    }
    #[inline(always)]
    fn dot(w: Self::W, a: &[i16; 32]) -> Self::D {
        let half = |r: std::ops::Range<usize>| r.map(|j| w[j] as i32 * a[j] as i32).sum();
        [half(0..16), half(16..32)]
    }
    #[inline(always)]
    fn zero() -> Self::F {
        [0.0; 8]
    }
    #[inline(always)]
    fn fma(mut acc: Self::F, d: Self::D, s: f32) -> Self::F {
        acc[0] += (d[0] + d[1]) as f32 * s;
        acc
    }
    #[inline(always)]
    fn fma2(mut acc: Self::F, d: Self::D, s0: f32, s1: f32) -> Self::F {
        acc[0] += d[0] as f32 * s0;
        acc[1] += d[1] as f32 * s1;
        acc
    }
    #[inline(always)]
    fn sum(acc: Self::F) -> f32 {
        acc.iter().sum()
    }
    #[inline(always)]
    fn fmul_add(mut acc: Self::F, a: &[f32; 8], b: &[f32; 8]) -> Self::F {
        for j in 0..8 {
            acc[j] += a[j] * b[j];
        }
        acc
    }
    #[inline(always)]
    fn axpy(y: &mut [f32; 8], a: f32, x: &[f32; 8]) {
        for j in 0..8 {
            y[j] += a * x[j];
        }
    }
    #[inline(always)]
    fn f16_to_f32(src: &[u16; 8], dst: &mut [f32; 8]) {
        for j in 0..8 {
            dst[j] = half::f16::from_bits(src[j]).to_f32();
        }
    }
    #[inline(always)]
    fn splat(x: f32) -> Self::F {
        [x; 8]
    }
    #[inline(always)]
    fn loadf(a: &[f32; 8]) -> Self::F {
        *a
    }
    #[inline(always)]
    fn storef(v: Self::F, out: &mut [f32; 8]) {
        *out = v;
    }
    #[inline(always)]
    fn fmadd(acc: Self::F, a: Self::F, b: Self::F) -> Self::F {
        std::array::from_fn(|j| acc[j] + a[j] * b[j])
    }
    #[inline(always)]
    fn addf(a: Self::F, b: Self::F) -> Self::F {
        std::array::from_fn(|j| a[j] + b[j])
    }
    #[inline(always)]
    fn mulf(a: Self::F, b: Self::F) -> Self::F {
        std::array::from_fn(|j| a[j] * b[j])
    }
    type I = [i32; 8];
    #[inline(always)]
    fn zeroi() -> Self::I {
        [0; 8]
    }
    #[inline(always)]
    fn dot_pair_splat(acc: Self::I, w: [i16; 2], b: &[i16; 16]) -> Self::I {
        std::array::from_fn(|j| acc[j] + w[0] as i32 * b[2 * j] as i32 + w[1] as i32 * b[2 * j + 1] as i32)
    }
    #[inline(always)]
    fn to_f32(a: Self::I) -> Self::F {
        a.map(|x| x as f32)
    }
    #[inline(always)]
    fn abs_max(acc: Self::F, x: Self::F) -> Self::F {
        std::array::from_fn(|j| acc[j].max(x[j].abs()))
    }
    #[inline(always)]
    fn hmax(a: Self::F) -> f32 {
        a.iter().fold(0f32, |m, &x| m.max(x))
    }
    #[inline(always)]
    fn to_i16(x: Self::F, inv: Self::F) -> [i16; 8] {
        std::array::from_fn(|j| (x[j] * inv[j]).round_ties_even() as i16)
    }
    #[inline(always)]
    fn interleave(a: [i16; 8], b: [i16; 8], out: &mut [i16; 16]) {
        for j in 0..8 {
            out[2 * j] = a[j];
            out[2 * j + 1] = b[j];
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma", target_feature = "f16c"))]
mod avx2 {
    use super::Simd;
    use std::arch::x86_64::*;

    /// x86-64 with AVX2, FMA and F16C (x86-64-v3: the native build's target CPU).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Avx2;

    // SAFETY (every block below): the module exists only where the build enables avx2, fma and
    // f16c, and every load and store goes through a reference of the exact size read.
    impl Simd for Avx2 {
        type B = __m256i;
        /// Weights 0..16 and 16..32.
        type W = (__m256i, __m256i);
        /// Pair sums of weights 0..16 and of 16..32.
        type D = (__m256i, __m256i);
        type F = __m256;

        #[inline(always)]
        fn load(bytes: &[u8; 32]) -> Self::B {
            unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
        }
        #[inline(always)]
        fn nibbles(bytes: &[u8; 16]) -> Self::B {
            unsafe {
                let v = _mm_loadu_si128(bytes.as_ptr().cast());
                let both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
                _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
            }
        }
        #[inline(always)]
        fn bit_mask(bits: u32) -> Self::B {
            unsafe {
                let spread = _mm256_shuffle_epi8(
                    _mm256_set1_epi32(bits as i32),
                    _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0),
                );
                let one_bit = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
                _mm256_cmpeq_epi8(one_bit, _mm256_set1_epi64x(-1))
            }
        }
        #[inline(always)]
        fn and(a: Self::B, mask: u8) -> Self::B {
            unsafe { _mm256_and_si256(a, _mm256_set1_epi8(mask as i8)) }
        }
        #[inline(always)]
        fn or(a: Self::B, b: Self::B) -> Self::B {
            unsafe { _mm256_or_si256(a, b) }
        }
        #[inline(always)]
        fn shr(a: Self::B, n: u32) -> Self::B {
            unsafe { _mm256_and_si256(_mm256_srl_epi16(a, _mm_cvtsi32_si128(n as i32)), _mm256_set1_epi8((0xffu8 >> n) as i8)) }
        }
        #[inline(always)]
        fn shl(a: Self::B, n: u32) -> Self::B {
            unsafe { _mm256_and_si256(_mm256_sll_epi16(a, _mm_cvtsi32_si128(n as i32)), _mm256_set1_epi8((0xffu8 << n) as i8)) }
        }
        #[inline(always)]
        fn sub(a: Self::B, v: u8) -> Self::B {
            unsafe { _mm256_sub_epi8(a, _mm256_set1_epi8(v as i8)) }
        }
        #[inline(always)]
        fn widen(a: Self::B) -> Self::W {
            unsafe { (_mm256_cvtepi8_epi16(_mm256_castsi256_si128(a)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(a, 1))) }
        }
        #[inline(always)]
        fn dot(w: Self::W, a: &[i16; 32]) -> Self::D {
            unsafe {
                let lo = _mm256_madd_epi16(w.0, _mm256_loadu_si256(a.as_ptr().cast()));
                let hi = _mm256_madd_epi16(w.1, _mm256_loadu_si256(a.as_ptr().add(16).cast()));
                (lo, hi)
            }
        }
        #[inline(always)]
        fn zero() -> Self::F {
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        fn fma(acc: Self::F, d: Self::D, s: f32) -> Self::F {
            unsafe { _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(d.0, d.1)), _mm256_set1_ps(s), acc) }
        }
        #[inline(always)]
        fn fma2(acc: Self::F, d: Self::D, s0: f32, s1: f32) -> Self::F {
            unsafe {
                let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d.0), _mm256_set1_ps(s0), acc);
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(d.1), _mm256_set1_ps(s1), acc)
            }
        }
        #[inline(always)]
        fn sum(acc: Self::F) -> f32 {
            unsafe {
                let four = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
                let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
                _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)))
            }
        }
        #[inline(always)]
        fn fmul_add(acc: Self::F, a: &[f32; 8], b: &[f32; 8]) -> Self::F {
            unsafe { _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr()), _mm256_loadu_ps(b.as_ptr()), acc) }
        }
        #[inline(always)]
        fn axpy(y: &mut [f32; 8], a: f32, x: &[f32; 8]) {
            unsafe {
                let r = _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(y.as_ptr()));
                _mm256_storeu_ps(y.as_mut_ptr(), r)
            }
        }
        #[inline(always)]
        fn f16_to_f32(src: &[u16; 8], dst: &mut [f32; 8]) {
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().cast()))) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self::F {
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        fn loadf(a: &[f32; 8]) -> Self::F {
            unsafe { _mm256_loadu_ps(a.as_ptr()) }
        }
        #[inline(always)]
        fn storef(v: Self::F, out: &mut [f32; 8]) {
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) }
        }
        #[inline(always)]
        fn fmadd(acc: Self::F, a: Self::F, b: Self::F) -> Self::F {
            unsafe { _mm256_fmadd_ps(a, b, acc) }
        }
        #[inline(always)]
        fn addf(a: Self::F, b: Self::F) -> Self::F {
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        fn mulf(a: Self::F, b: Self::F) -> Self::F {
            unsafe { _mm256_mul_ps(a, b) }
        }
        type I = __m256i;
        #[inline(always)]
        fn zeroi() -> Self::I {
            unsafe { _mm256_setzero_si256() }
        }
        #[inline(always)]
        fn dot_pair_splat(acc: Self::I, w: [i16; 2], b: &[i16; 16]) -> Self::I {
            let pair = (w[0] as u16 as u32 | (w[1] as u16 as u32) << 16) as i32;
            unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_set1_epi32(pair), _mm256_loadu_si256(b.as_ptr().cast()))) }
        }
        #[inline(always)]
        fn to_f32(a: Self::I) -> Self::F {
            unsafe { _mm256_cvtepi32_ps(a) }
        }
        #[inline(always)]
        fn abs_max(acc: Self::F, x: Self::F) -> Self::F {
            unsafe { _mm256_max_ps(acc, _mm256_andnot_ps(_mm256_set1_ps(-0.0), x)) }
        }
        #[inline(always)]
        fn hmax(a: Self::F) -> f32 {
            unsafe {
                let four = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
                let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
                _mm_cvtss_f32(_mm_max_ss(two, _mm_movehdup_ps(two)))
            }
        }
        #[inline(always)]
        fn to_i16(x: Self::F, inv: Self::F) -> [i16; 8] {
            // cvtps rounds by the default mode: to nearest, ties to even.
            unsafe {
                let i = _mm256_cvtps_epi32(_mm256_mul_ps(x, inv));
                let mut out = [0i16; 8];
                _mm_storeu_si128(out.as_mut_ptr().cast(), _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
                out
            }
        }
        #[inline(always)]
        fn interleave(a: [i16; 8], b: [i16; 8], out: &mut [i16; 16]) {
            unsafe {
                let (a, b) = (_mm_loadu_si128(a.as_ptr().cast()), _mm_loadu_si128(b.as_ptr().cast()));
                _mm_storeu_si128(out.as_mut_ptr().cast(), _mm_unpacklo_epi16(a, b));
                _mm_storeu_si128(out.as_mut_ptr().add(8).cast(), _mm_unpackhi_epi16(a, b));
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::Simd;
    use std::arch::wasm32::*;

    /// WebAssembly's 128-bit SIMD: every browser engine since 2021 (Safari 16.4).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Simd128;

    const BIT_OF_LANE: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];


    #[inline(always)]
    fn hsum(v: v128) -> f32 {
        f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v)
    }

    // SAFETY (every load and store below): through a reference of at least the size read.
    impl Simd for Simd128 {
        type B = (v128, v128);
        /// Weights 0..8, 8..16, 16..24, 24..32.
        type W = [v128; 4];
        type D = (v128, v128);
        type F = (v128, v128);

        #[inline(always)]
        fn load(bytes: &[u8; 32]) -> Self::B {
            unsafe { (v128_load(bytes.as_ptr().cast()), v128_load(bytes.as_ptr().add(16).cast())) }
        }
        #[inline(always)]
        fn nibbles(bytes: &[u8; 16]) -> Self::B {
            let v = unsafe { v128_load(bytes.as_ptr().cast()) };
            (v128_and(v, u8x16_splat(0x0f)), u8x16_shr(v, 4))
        }
        #[inline(always)]
        fn bit_mask(bits: u32) -> Self::B {
            let word = u32x4_splat(bits);
            let lanes = u8x16(BIT_OF_LANE[0], BIT_OF_LANE[1], BIT_OF_LANE[2], BIT_OF_LANE[3], BIT_OF_LANE[4], BIT_OF_LANE[5], BIT_OF_LANE[6], BIT_OF_LANE[7], 1, 2, 4, 8, 16, 32, 64, 128);
            let spread = |b0: u8, b1: u8| {
                let bytes = i8x16_swizzle(word, u8x16(b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1, b1, b1, b1, b1));
                i8x16_eq(v128_and(bytes, lanes), lanes)
            };
            (spread(0, 1), spread(2, 3))
        }
        #[inline(always)]
        fn and(a: Self::B, mask: u8) -> Self::B {
            let m = u8x16_splat(mask);
            (v128_and(a.0, m), v128_and(a.1, m))
        }
        #[inline(always)]
        fn or(a: Self::B, b: Self::B) -> Self::B {
            (v128_or(a.0, b.0), v128_or(a.1, b.1))
        }
        #[inline(always)]
        fn shr(a: Self::B, n: u32) -> Self::B {
            (u8x16_shr(a.0, n), u8x16_shr(a.1, n))
        }
        #[inline(always)]
        fn shl(a: Self::B, n: u32) -> Self::B {
            (i8x16_shl(a.0, n), i8x16_shl(a.1, n))
        }
        #[inline(always)]
        fn sub(a: Self::B, v: u8) -> Self::B {
            let s = u8x16_splat(v);
            (i8x16_sub(a.0, s), i8x16_sub(a.1, s))
        }
        #[inline(always)]
        fn widen(a: Self::B) -> Self::W {
            [i16x8_extend_low_i8x16(a.0), i16x8_extend_high_i8x16(a.0), i16x8_extend_low_i8x16(a.1), i16x8_extend_high_i8x16(a.1)]
        }
        #[inline(always)]
        fn dot(w: Self::W, a: &[i16; 32]) -> Self::D {
            let p = a.as_ptr();
            unsafe {
                let d = |i: usize| i32x4_dot_i16x8(w[i], v128_load(p.add(8 * i).cast()));
                (i32x4_add(d(0), d(1)), i32x4_add(d(2), d(3)))
            }
        }
        #[inline(always)]
        fn zero() -> Self::F {
            (f32x4_splat(0.0), f32x4_splat(0.0))
        }
        #[inline(always)]
        fn fma(acc: Self::F, d: Self::D, s: f32) -> Self::F {
            (f32x4_add(acc.0, f32x4_mul(f32x4_convert_i32x4(i32x4_add(d.0, d.1)), f32x4_splat(s))), acc.1)
        }
        #[inline(always)]
        fn fma2(acc: Self::F, d: Self::D, s0: f32, s1: f32) -> Self::F {
            (
                f32x4_add(acc.0, f32x4_mul(f32x4_convert_i32x4(d.0), f32x4_splat(s0))),
                f32x4_add(acc.1, f32x4_mul(f32x4_convert_i32x4(d.1), f32x4_splat(s1))),
            )
        }
        #[inline(always)]
        fn sum(acc: Self::F) -> f32 {
            hsum(f32x4_add(acc.0, acc.1))
        }
        #[inline(always)]
        fn fmul_add(acc: Self::F, a: &[f32; 8], b: &[f32; 8]) -> Self::F {
            unsafe {
                let (a0, a1) = (v128_load(a.as_ptr().cast()), v128_load(a.as_ptr().add(4).cast()));
                let (b0, b1) = (v128_load(b.as_ptr().cast()), v128_load(b.as_ptr().add(4).cast()));
                (f32x4_add(acc.0, f32x4_mul(a0, b0)), f32x4_add(acc.1, f32x4_mul(a1, b1)))
            }
        }
        #[inline(always)]
        fn axpy(y: &mut [f32; 8], a: f32, x: &[f32; 8]) {
            let s = f32x4_splat(a);
            unsafe {
                let (x0, x1) = (v128_load(x.as_ptr().cast()), v128_load(x.as_ptr().add(4).cast()));
                let (y0, y1) = (v128_load(y.as_ptr().cast()), v128_load(y.as_ptr().add(4).cast()));
                v128_store(y.as_mut_ptr().cast(), f32x4_add(y0, f32x4_mul(s, x0)));
                v128_store(y.as_mut_ptr().add(4).cast(), f32x4_add(y1, f32x4_mul(s, x1)));
            }
        }
        #[inline(always)]
        fn f16_to_f32(src: &[u16; 8], dst: &mut [f32; 8]) {
            // Exponent and mantissa moved to f32's places, then scaled by 2^112 to rebias: exact
            // for normal and subnormal halves (KV values are finite).
            let h = unsafe { v128_load(src.as_ptr().cast()) };
            let widen = |w: v128| {
                let sign = i32x4_shl(v128_and(w, u32x4_splat(0x8000)), 16);
                let magnitude = f32x4_mul(i32x4_shl(v128_and(w, u32x4_splat(0x7fff)), 13), f32x4_splat(f32::from_bits(0x7780_0000)));
                v128_or(sign, magnitude)
            };
            unsafe {
                v128_store(dst.as_mut_ptr().cast(), widen(u32x4_extend_low_u16x8(h)));
                v128_store(dst.as_mut_ptr().add(4).cast(), widen(u32x4_extend_high_u16x8(h)));
            }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self::F {
            (f32x4_splat(x), f32x4_splat(x))
        }
        #[inline(always)]
        fn loadf(a: &[f32; 8]) -> Self::F {
            unsafe { (v128_load(a.as_ptr().cast()), v128_load(a.as_ptr().add(4).cast())) }
        }
        #[inline(always)]
        fn storef(v: Self::F, out: &mut [f32; 8]) {
            unsafe {
                v128_store(out.as_mut_ptr().cast(), v.0);
                v128_store(out.as_mut_ptr().add(4).cast(), v.1);
            }
        }
        #[inline(always)]
        fn fmadd(acc: Self::F, a: Self::F, b: Self::F) -> Self::F {
            (f32x4_add(acc.0, f32x4_mul(a.0, b.0)), f32x4_add(acc.1, f32x4_mul(a.1, b.1)))
        }
        #[inline(always)]
        fn addf(a: Self::F, b: Self::F) -> Self::F {
            (f32x4_add(a.0, b.0), f32x4_add(a.1, b.1))
        }
        #[inline(always)]
        fn mulf(a: Self::F, b: Self::F) -> Self::F {
            (f32x4_mul(a.0, b.0), f32x4_mul(a.1, b.1))
        }
        type I = (v128, v128);
        #[inline(always)]
        fn zeroi() -> Self::I {
            (i32x4_splat(0), i32x4_splat(0))
        }
        #[inline(always)]
        fn dot_pair_splat(acc: Self::I, w: [i16; 2], b: &[i16; 16]) -> Self::I {
            let pair = i32x4_splat((w[0] as u16 as u32 | (w[1] as u16 as u32) << 16) as i32);
            unsafe {
                let (b0, b1) = (v128_load(b.as_ptr().cast()), v128_load(b.as_ptr().add(8).cast()));
                (i32x4_add(acc.0, i32x4_dot_i16x8(pair, b0)), i32x4_add(acc.1, i32x4_dot_i16x8(pair, b1)))
            }
        }
        #[inline(always)]
        fn to_f32(a: Self::I) -> Self::F {
            (f32x4_convert_i32x4(a.0), f32x4_convert_i32x4(a.1))
        }
        #[inline(always)]
        fn abs_max(acc: Self::F, x: Self::F) -> Self::F {
            // pmax: no NaN handling (KV values and queries are finite).
            (f32x4_pmax(acc.0, f32x4_abs(x.0)), f32x4_pmax(acc.1, f32x4_abs(x.1)))
        }
        #[inline(always)]
        fn hmax(a: Self::F) -> f32 {
            // Lanes folded by shuffles and pmax: `f32::max` on the lanes is a libm call each.
            let m = f32x4_pmax(a.0, a.1);
            let m = f32x4_pmax(m, i32x4_shuffle::<2, 3, 0, 1>(m, m));
            f32x4_extract_lane::<0>(f32x4_pmax(m, i32x4_shuffle::<1, 0, 3, 2>(m, m)))
        }
        #[inline(always)]
        fn to_i16(x: Self::F, inv: Self::F) -> [i16; 8] {
            // Adding 1.5 · 2^23 rounds to an integer (to nearest, ties to even) in the low
            // mantissa bits, for |x · inv| < 2^22: no float-to-int conversion, which engines
            // expand into several instructions for its saturation.
            let magic = f32x4_splat(12_582_912.0);
            let round = |v: v128, inv: v128| i32x4_sub(f32x4_add(f32x4_mul(v, inv), magic), magic);
            let i = i16x8_narrow_i32x4(round(x.0, inv.0), round(x.1, inv.1));
            let mut out = [0i16; 8];
            unsafe { v128_store(out.as_mut_ptr().cast(), i) };
            out
        }
        #[inline(always)]
        fn interleave(a: [i16; 8], b: [i16; 8], out: &mut [i16; 16]) {
            unsafe {
                let (a, b) = (v128_load(a.as_ptr().cast()), v128_load(b.as_ptr().cast()));
                v128_store(out.as_mut_ptr().cast(), i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(a, b));
                v128_store(out.as_mut_ptr().add(8).cast(), i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(a, b));
            }
        }
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon {
    use super::Simd;
    use std::arch::aarch64::*;

    /// AArch64's Advanced SIMD (every 64-bit ARM CPU: phones, Apple silicon, Graviton).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Neon;

    const BIT_OF_LANE: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    const BYTE_OF_LANE: [[u8; 16]; 2] = [[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3]];

    // SAFETY (every block below): NEON is part of the aarch64 target, and every load and store
    // goes through a reference of at least the size read.
    impl Simd for Neon {
        type B = (uint8x16_t, uint8x16_t);
        /// Weights 0..8, 8..16, 16..24, 24..32.
        type W = [int16x8_t; 4];
        type D = (int32x4_t, int32x4_t);
        type F = (float32x4_t, float32x4_t);

        #[inline(always)]
        fn load(bytes: &[u8; 32]) -> Self::B {
            unsafe { (vld1q_u8(bytes.as_ptr()), vld1q_u8(bytes.as_ptr().add(16))) }
        }
        #[inline(always)]
        fn nibbles(bytes: &[u8; 16]) -> Self::B {
            unsafe {
                let v = vld1q_u8(bytes.as_ptr());
                (vandq_u8(v, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(v))
            }
        }
        #[inline(always)]
        fn bit_mask(bits: u32) -> Self::B {
            unsafe {
                let word = vreinterpretq_u8_u32(vdupq_n_u32(bits));
                let lanes = vld1q_u8(BIT_OF_LANE.as_ptr());
                let spread = |i: usize| vtstq_u8(vqtbl1q_u8(word, vld1q_u8(BYTE_OF_LANE[i].as_ptr())), lanes);
                (spread(0), spread(1))
            }
        }
        #[inline(always)]
        fn and(a: Self::B, mask: u8) -> Self::B {
            unsafe {
                let m = vdupq_n_u8(mask);
                (vandq_u8(a.0, m), vandq_u8(a.1, m))
            }
        }
        #[inline(always)]
        fn or(a: Self::B, b: Self::B) -> Self::B {
            unsafe { (vorrq_u8(a.0, b.0), vorrq_u8(a.1, b.1)) }
        }
        #[inline(always)]
        fn shr(a: Self::B, n: u32) -> Self::B {
            // A shift by a negative count is a right shift.
            unsafe {
                let by = vdupq_n_s8(-(n as i8));
                (vshlq_u8(a.0, by), vshlq_u8(a.1, by))
            }
        }
        #[inline(always)]
        fn shl(a: Self::B, n: u32) -> Self::B {
            unsafe {
                let by = vdupq_n_s8(n as i8);
                (vshlq_u8(a.0, by), vshlq_u8(a.1, by))
            }
        }
        #[inline(always)]
        fn sub(a: Self::B, v: u8) -> Self::B {
            unsafe {
                let s = vdupq_n_u8(v);
                (vsubq_u8(a.0, s), vsubq_u8(a.1, s))
            }
        }
        #[inline(always)]
        fn widen(a: Self::B) -> Self::W {
            unsafe {
                let (lo, hi) = (vreinterpretq_s8_u8(a.0), vreinterpretq_s8_u8(a.1));
                [vmovl_s8(vget_low_s8(lo)), vmovl_high_s8(lo), vmovl_s8(vget_low_s8(hi)), vmovl_high_s8(hi)]
            }
        }
        #[inline(always)]
        fn dot(w: Self::W, a: &[i16; 32]) -> Self::D {
            let p = a.as_ptr();
            unsafe {
                let d = |i: usize| {
                    let x = vld1q_s16(p.add(8 * i));
                    vmlal_high_s16(vmull_s16(vget_low_s16(w[i]), vget_low_s16(x)), w[i], x)
                };
                (vaddq_s32(d(0), d(1)), vaddq_s32(d(2), d(3)))
            }
        }
        #[inline(always)]
        fn zero() -> Self::F {
            unsafe { (vdupq_n_f32(0.0), vdupq_n_f32(0.0)) }
        }
        #[inline(always)]
        fn fma(acc: Self::F, d: Self::D, s: f32) -> Self::F {
            unsafe { (vfmaq_n_f32(acc.0, vcvtq_f32_s32(vaddq_s32(d.0, d.1)), s), acc.1) }
        }
        #[inline(always)]
        fn fma2(acc: Self::F, d: Self::D, s0: f32, s1: f32) -> Self::F {
            unsafe { (vfmaq_n_f32(acc.0, vcvtq_f32_s32(d.0), s0), vfmaq_n_f32(acc.1, vcvtq_f32_s32(d.1), s1)) }
        }
        #[inline(always)]
        fn sum(acc: Self::F) -> f32 {
            unsafe { vaddvq_f32(vaddq_f32(acc.0, acc.1)) }
        }
        #[inline(always)]
        fn fmul_add(acc: Self::F, a: &[f32; 8], b: &[f32; 8]) -> Self::F {
            unsafe {
                let (a0, a1) = (vld1q_f32(a.as_ptr()), vld1q_f32(a.as_ptr().add(4)));
                let (b0, b1) = (vld1q_f32(b.as_ptr()), vld1q_f32(b.as_ptr().add(4)));
                (vfmaq_f32(acc.0, a0, b0), vfmaq_f32(acc.1, a1, b1))
            }
        }
        #[inline(always)]
        fn axpy(y: &mut [f32; 8], a: f32, x: &[f32; 8]) {
            unsafe {
                let (x0, x1) = (vld1q_f32(x.as_ptr()), vld1q_f32(x.as_ptr().add(4)));
                let (y0, y1) = (vld1q_f32(y.as_ptr()), vld1q_f32(y.as_ptr().add(4)));
                vst1q_f32(y.as_mut_ptr(), vfmaq_n_f32(y0, x0, a));
                vst1q_f32(y.as_mut_ptr().add(4), vfmaq_n_f32(y1, x1, a));
            }
        }
        #[inline(always)]
        fn f16_to_f32(src: &[u16; 8], dst: &mut [f32; 8]) {
            // As simd128's: exponent and mantissa moved to f32's places, then scaled by 2^112 to
            // rebias (exact for normal and subnormal halves; KV values are finite).
            unsafe {
                let h = vld1q_u16(src.as_ptr());
                let widen = |w: uint32x4_t| {
                    let sign = vshlq_n_u32::<16>(vandq_u32(w, vdupq_n_u32(0x8000)));
                    let magnitude = vmulq_n_f32(vreinterpretq_f32_u32(vshlq_n_u32::<13>(vandq_u32(w, vdupq_n_u32(0x7fff)))), f32::from_bits(0x7780_0000));
                    vreinterpretq_f32_u32(vorrq_u32(sign, vreinterpretq_u32_f32(magnitude)))
                };
                vst1q_f32(dst.as_mut_ptr(), widen(vmovl_u16(vget_low_u16(h))));
                vst1q_f32(dst.as_mut_ptr().add(4), widen(vmovl_high_u16(h)));
            }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self::F {
            unsafe { (vdupq_n_f32(x), vdupq_n_f32(x)) }
        }
        #[inline(always)]
        fn loadf(a: &[f32; 8]) -> Self::F {
            unsafe { (vld1q_f32(a.as_ptr()), vld1q_f32(a.as_ptr().add(4))) }
        }
        #[inline(always)]
        fn storef(v: Self::F, out: &mut [f32; 8]) {
            unsafe {
                vst1q_f32(out.as_mut_ptr(), v.0);
                vst1q_f32(out.as_mut_ptr().add(4), v.1);
            }
        }
        #[inline(always)]
        fn fmadd(acc: Self::F, a: Self::F, b: Self::F) -> Self::F {
            unsafe { (vfmaq_f32(acc.0, a.0, b.0), vfmaq_f32(acc.1, a.1, b.1)) }
        }
        #[inline(always)]
        fn addf(a: Self::F, b: Self::F) -> Self::F {
            unsafe { (vaddq_f32(a.0, b.0), vaddq_f32(a.1, b.1)) }
        }
        #[inline(always)]
        fn mulf(a: Self::F, b: Self::F) -> Self::F {
            unsafe { (vmulq_f32(a.0, b.0), vmulq_f32(a.1, b.1)) }
        }
        type I = (int32x4_t, int32x4_t);
        #[inline(always)]
        fn zeroi() -> Self::I {
            unsafe { (vdupq_n_s32(0), vdupq_n_s32(0)) }
        }
        #[inline(always)]
        fn dot_pair_splat(acc: Self::I, w: [i16; 2], b: &[i16; 16]) -> Self::I {
            unsafe {
                let pairs = |x: int16x8_t, y: int16x8_t| vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y));
                let w = vreinterpretq_s16_u32(vdupq_n_u32(w[0] as u16 as u32 | (w[1] as u16 as u32) << 16));
                let (b0, b1) = (vld1q_s16(b.as_ptr()), vld1q_s16(b.as_ptr().add(8)));
                (vaddq_s32(acc.0, pairs(w, b0)), vaddq_s32(acc.1, pairs(w, b1)))
            }
        }
        #[inline(always)]
        fn to_f32(a: Self::I) -> Self::F {
            unsafe { (vcvtq_f32_s32(a.0), vcvtq_f32_s32(a.1)) }
        }
        #[inline(always)]
        fn abs_max(acc: Self::F, x: Self::F) -> Self::F {
            unsafe { (vmaxq_f32(acc.0, vabsq_f32(x.0)), vmaxq_f32(acc.1, vabsq_f32(x.1))) }
        }
        #[inline(always)]
        fn hmax(a: Self::F) -> f32 {
            unsafe { vmaxvq_f32(vmaxq_f32(a.0, a.1)) }
        }
        #[inline(always)]
        fn to_i16(x: Self::F, inv: Self::F) -> [i16; 8] {
            unsafe {
                let i = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(x.0, inv.0))), vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(x.1, inv.1))));
                let mut out = [0i16; 8];
                vst1q_s16(out.as_mut_ptr(), i);
                out
            }
        }
        #[inline(always)]
        fn interleave(a: [i16; 8], b: [i16; 8], out: &mut [i16; 16]) {
            unsafe {
                let (a, b) = (vld1q_s16(a.as_ptr()), vld1q_s16(b.as_ptr()));
                vst1q_s16(out.as_mut_ptr(), vzip1q_s16(a, b));
                vst1q_s16(out.as_mut_ptr().add(8), vzip2q_s16(a, b));
            }
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma", target_feature = "f16c"))]
pub use avx2::Avx2 as Native;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use wasm::Simd128 as Native;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub use neon::Neon as Native;
/// Targets without a SIMD implementation here run the scalar twin.
#[cfg(not(any(
    all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma", target_feature = "f16c"),
    all(target_arch = "wasm32", target_feature = "simd128"),
    all(target_arch = "aarch64", target_feature = "neon")
)))]
pub use Scalar as Native;

/// The SIMD instruction set the kernels were built for, for `info` and the benchmarks.
pub const NATIVE_NAME: &str = if cfg!(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma", target_feature = "f16c")) {
    "avx2"
} else if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
    "simd128"
} else if cfg!(all(target_arch = "aarch64", target_feature = "neon")) {
    "neon"
} else {
    "scalar"
};
