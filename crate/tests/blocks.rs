//! Block formats: hand-built blocks dequantize to exact values, and quantize -> dequantize
//! stays within an error budget per type derived from how ggml's reference quantizers round.

use half::f16;
use radixlm::gguf::blocks::{dequantize, quantize};
use radixlm::gguf::GgmlType;
use radixlm::model::synthetic::SplitMix64;

/// Relative rounding error of storing a normal number as f16 (half an ulp: 2^-11).
const F16_REL: f32 = 1.0 / 2048.0;

/// Most that storing `v` as f16 can move it: half an ulp, which below the normal range
/// (2^-14) is half the subnormal spacing, 2^-25.
fn f16_err(v: f32) -> f32 {
    (v.abs() * F16_REL).max(1.0 / (1u32 << 25) as f32)
}

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn deq(ty: GgmlType, data: &[u8]) -> Vec<f32> {
    let mut out = vec![f32::NAN; data.len() / ty.block_bytes() * ty.block_len()];
    dequantize(ty, data, &mut out);
    out
}

#[test]
fn type_ids_names_and_sizes() {
    for (ty, id, name, len, bytes) in [
        (GgmlType::F32, 0, "F32", 1, 4),
        (GgmlType::F16, 1, "F16", 1, 2),
        (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
        (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
        (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
        (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
        (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
        (GgmlType::Q4_K, 12, "Q4_K", 256, 144),
        (GgmlType::Q5_K, 13, "Q5_K", 256, 176),
        (GgmlType::Q6_K, 14, "Q6_K", 256, 210),
        (GgmlType::BF16, 30, "BF16", 1, 2),
    ] {
        assert_eq!(GgmlType::from_id(id), Ok(ty));
        assert_eq!((ty.id(), ty.name(), ty.block_len(), ty.block_bytes()), (id, name, len, bytes));
    }
    assert_eq!(GgmlType::from_id(11), Err("Q3_K (ggml type id 11)".into()));
    assert_eq!(GgmlType::from_id(10), Err("Q2_K (ggml type id 10)".into()));
    assert_eq!(GgmlType::from_id(4), Err("unknown ggml type id 4".into()));
    assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
    assert_eq!(GgmlType::Q8_0.row_bytes(33), None);
    assert_eq!(GgmlType::F16.row_bytes(3), Some(6));
    assert_eq!(GgmlType::Q6_K.row_bytes(896), None);
    assert_eq!(GgmlType::Q4_K.row_bytes(2048), Some(8 * 144));
}

#[derive(serde::Deserialize)]
struct BlockGolden {
    #[serde(rename = "type")]
    ty: String,
    data: String,
    weights: Vec<u32>,
}

#[derive(serde::Deserialize)]
struct BlockGoldens {
    goldens: Vec<BlockGolden>,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn every_block_format_dequantizes_as_ggml_does() {
    // Random blocks dequantized by gguf-py (llama.cpp's Python package, whose dequantizers follow
    // ggml-quants.c): scripts/make_block_goldens.py. Same arithmetic in the same order: exact.
    let file: BlockGoldens = serde_json::from_str(include_str!("fixtures/block_goldens.json")).unwrap();
    let mut seen = Vec::new();
    for g in &file.goldens {
        let ty = (0..40).filter_map(|id| GgmlType::from_id(id).ok()).find(|t| t.name() == g.ty).unwrap_or_else(|| panic!("type {}", g.ty));
        let got = deq(ty, &hex(&g.data));
        assert_eq!(got.len(), g.weights.len(), "{}", g.ty);
        for (i, (got, &want)) in got.iter().zip(&g.weights).enumerate() {
            assert_eq!(got.to_bits(), want, "{} weight {i}: got {got}, want {}", g.ty, f32::from_bits(want));
        }
        seen.push(ty);
    }
    assert_eq!(seen.len(), 9, "every block format has goldens");
}

#[test]
fn f32_block_is_the_bytes() {
    let vals = [0.0f32, -0.0, 1.5, f32::MIN_POSITIVE, f32::MAX, -1e-30];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let got = deq(GgmlType::F32, &data);
    assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), vals.map(f32::to_bits));
}

#[test]
fn f16_block_decodes_known_bit_patterns() {
    let cases: [(u16, f32); 8] = [
        (0x0000, 0.0),
        (0x3c00, 1.0),
        (0xc000, -2.0),
        (0x3555, 0.333_251_95),
        (0x7bff, 65504.0),
        (0x0400, 6.103_515_6e-5),   // smallest normal, 2^-14
        (0x0001, 5.960_464_5e-8),   // smallest subnormal, 2^-24
        (0x7c00, f32::INFINITY),
    ];
    let data: Vec<u8> = cases.iter().flat_map(|(bits, _)| bits.to_le_bytes()).collect();
    let got = deq(GgmlType::F16, &data);
    for ((bits, want), got) in cases.iter().zip(got) {
        assert_eq!(got, *want, "f16 bits {bits:#06x}");
    }
}

#[test]
fn q4_0_block() {
    // d = 0.25; byte j holds weight j in its low nibble and weight j + 16 in its high one.
    let mut block = h(0.25).to_vec();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let want: Vec<f32> = (0..16).map(|j| (j as f32 - 8.0) * 0.25).chain((0..16).map(|j| (7 - j) as f32 * 0.25)).collect();
    assert_eq!(deq(GgmlType::Q4_0, &block), want);
}

#[test]
fn q4_1_block() {
    // d = 0.5, m = -1: weight = nibble * 0.5 - 1.
    let mut block = [h(0.5), h(-1.0)].concat();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let want: Vec<f32> = (0..16).map(|j| j as f32 * 0.5 - 1.0).chain((0..16).map(|j| (15 - j) as f32 * 0.5 - 1.0)).collect();
    assert_eq!(deq(GgmlType::Q4_1, &block), want);
}

#[test]
fn q8_0_block() {
    // d = 1/8: weight = q / 8 for q in -128..=127.
    let qs: Vec<i8> = (0..32).map(|j| if j == 0 { -128 } else { (j * 8 - 121) as i8 }).collect();
    let mut block = h(0.125).to_vec();
    block.extend(qs.iter().map(|&q| q as u8));
    let want: Vec<f32> = qs.iter().map(|&q| q as f32 / 8.0).collect();
    assert_eq!(deq(GgmlType::Q8_0, &block), want);
    assert_eq!((want[0], want[31]), (-16.0, 15.875));
}

#[test]
fn blocks_are_decoded_in_order() {
    // Two Q8_0 blocks with different scales: the second must use its own.
    let mut data = h(1.0).to_vec();
    data.extend([3u8; 32]);
    data.extend(h(-2.0));
    data.extend([3u8; 32]);
    let got = deq(GgmlType::Q8_0, &data);
    assert!(got[..32].iter().all(|&v| v == 3.0) && got[32..].iter().all(|&v| v == -6.0));
}

/// Seeded test values: normal noise at several scales, with an outlier in some blocks so the
/// scales differ between blocks.
fn test_values(n_blocks: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    let mut x = Vec::with_capacity(n_blocks * 32);
    for b in 0..n_blocks {
        let scale = [1.0, 0.02, 30.0, 1e-3][b % 4];
        let mut block: Vec<f32> = (0..32).map(|_| rng.normal() * scale).collect();
        if b % 3 == 0 {
            block[(rng.next_u64() % 32) as usize] = 8.0 * scale * if b % 2 == 0 { 1.0 } else { -1.0 };
        }
        x.extend(block);
    }
    x
}

/// Quantizes and dequantizes `x` and checks each weight against `budget(block, x)`.
fn check_budget(ty: GgmlType, x: &[f32], budget: impl Fn(&[f32], f32) -> f32) {
    let got = deq(ty, &quantize(ty, x));
    assert_eq!(got.len(), x.len());
    let bl = ty.block_len().max(32);
    for (b, (xs, gs)) in x.chunks(bl).zip(got.chunks(bl)).enumerate() {
        for (i, (&want, &got)) in xs.iter().zip(gs).enumerate() {
            let limit = budget(xs, want);
            let err = (got - want).abs();
            assert!(err <= limit, "{} block {b} index {i}: got {got}, want {want}, error {err} over {limit}", ty.name());
        }
    }
}

/// Slack for f32 arithmetic inside the quantizer (products and reciprocals of the scale).
fn f32_slack(amax: f32) -> f32 {
    amax * 4.0 * f32::EPSILON
}

fn amax(b: &[f32]) -> f32 {
    b.iter().fold(0f32, |m, v| m.max(v.abs()))
}

#[test]
fn f32_round_trip_is_exact() {
    let x = test_values(8, 1);
    assert_eq!(deq(GgmlType::F32, &quantize(GgmlType::F32, &x)), x);
}

#[test]
fn f16_round_trip() {
    // Values f16 represents come back exactly (normals, subnormals, signed zero, extremes).
    let exact: Vec<f32> = (-2048..=2048)
        .map(|i| i as f32 / 64.0)
        .chain([65504.0, -65504.0, 6.103_515_6e-5, 5.960_464_5e-8, -0.0])
        .collect();
    let got = deq(GgmlType::F16, &quantize(GgmlType::F16, &exact));
    assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), exact.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // Others round to nearest: within half an ulp, 2^-11 relative, in the normal range.
    let x: Vec<f32> = test_values(8, 2).into_iter().filter(|v| v.abs() >= 6.2e-5).collect();
    check_budget(GgmlType::F16, &x, |_, v| v.abs() * F16_REL);
}

#[test]
fn q8_0_round_trip_budget() {
    // d = amax / 127 and q = round(x / d), so rounding costs at most d / 2; d is stored as
    // f16, which moves each of the |q| <= 127 steps by at most f16_err(d).
    let x = test_values(64, 3);
    check_budget(GgmlType::Q8_0, &x, |b, _| {
        let d = amax(b) / 127.0;
        d / 2.0 + 127.0 * f16_err(d) + f32_slack(amax(b))
    });
}

/// Q4_0 and Q5_0, `half` = 8 or 16 (16 or 32 codes): ggml maps the weight of largest
/// magnitude, `max`, to -half: d = max / -half and q = clamp(floor(x / d + half + 0.5), 0,
/// 2·half - 1) - half. Rounding costs at most |d| / 2, except that x / d in (half - 0.5, half]
/// (weights near -max) clamps to half - 1, costing up to |d|. The f16 scale moves each of the
/// |q| <= half steps by at most f16_err(d).
fn symmetric_budget(ty: GgmlType, half: f32, seed: u64) {
    let x = test_values(64, seed);
    check_budget(ty, &x, |b, v| {
        let max = b.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -half;
        let rounding = if d != 0.0 && v / d > half - 0.5 { d.abs() } else { d.abs() / 2.0 };
        rounding + half * f16_err(d) + f32_slack(amax(b))
    });
}

/// Q4_1 and Q5_1 with `levels` = 15 or 31: d = (max - min) / levels, m = min and
/// q = round((x - min) / d): rounding costs at most d / 2. Both are stored as f16: m moves by
/// f16_err(min), each of the q <= levels steps by f16_err(d).
fn offset_budget(ty: GgmlType, levels: f32, seed: u64) {
    let x = test_values(64, seed);
    check_budget(ty, &x, |b, _| {
        let min = b.iter().copied().fold(f32::INFINITY, f32::min);
        let max = b.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / levels;
        d / 2.0 + f16_err(min) + levels * f16_err(d) + f32_slack(amax(b))
    });
}

#[test]
fn q4_0_round_trip_budget() {
    symmetric_budget(GgmlType::Q4_0, 8.0, 4);
}

#[test]
fn q4_1_round_trip_budget() {
    offset_budget(GgmlType::Q4_1, 15.0, 5);
}

#[test]
fn q5_0_round_trip_budget() {
    symmetric_budget(GgmlType::Q5_0, 16.0, 6);
}

#[test]
fn q5_1_round_trip_budget() {
    offset_budget(GgmlType::Q5_1, 31.0, 7);
}

#[test]
fn bf16_round_trip() {
    // Round to nearest with 8 significant bits: half a step, 2^-9 of the power of two below v,
    // so within 2^-8 of v, in the normal range.
    let x = test_values(8, 8);
    check_budget(GgmlType::BF16, &x, |_, v| v.abs() / 256.0);
}

/// Super-block test values: 256-weight blocks whose 32-weight sub-blocks differ in scale and
/// offset, as real rows do.
fn super_block_values(n_blocks: usize, seed: u64) -> Vec<f32> {
    let mut x = test_values(n_blocks * 8, seed);
    let mut rng = SplitMix64(seed + 100);
    for sub in x.chunks_mut(32) {
        let offset = rng.normal() * 0.1 * amax(sub);
        sub.iter_mut().for_each(|v| *v += offset);
    }
    x
}

/// Q4_K/Q5_K budget for weight `v` of sub-block `s` of super-block `b`: the sub-block's scale
/// (max - min) / levels and min -min(min, 0) are stored as 6-bit multiples of d = largest scale
/// / 63 and dmin = largest min / 63 (each f16), so each is off by at most half a step plus the
/// f16 error of 63 steps. Inside the codes' range rounding costs half the stored scale; a value
/// past either end is clamped, costing the min's error plus `levels` times the scale's.
fn k_quant_budget(b: &[f32], s: usize, levels: f32) -> f32 {
    let stats = |sub: &[f32]| {
        let min = sub.iter().copied().fold(f32::INFINITY, f32::min).min(0.0);
        let max = sub.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        ((max - min) / levels, -min)
    };
    let all: Vec<(f32, f32)> = b.chunks(32).map(stats).collect();
    let d = all.iter().fold(0f32, |m, a| m.max(a.0)) / 63.0;
    let dmin = all.iter().fold(0f32, |m, a| m.max(a.1)) / 63.0;
    let scale_err = d / 2.0 + 63.0 * f16_err(d);
    let min_err = dmin / 2.0 + 63.0 * f16_err(dmin);
    (all[s].0 + scale_err) / 2.0 + min_err + levels * scale_err + f32_slack(amax(b))
}

fn check_k_quant_budget(ty: GgmlType, x: &[f32], budget: impl Fn(&[f32], usize) -> f32) {
    let got = deq(ty, &quantize(ty, x));
    assert_eq!(got.len(), x.len());
    for (b, (xs, gs)) in x.chunks(256).zip(got.chunks(256)).enumerate() {
        for (i, (&want, &got)) in xs.iter().zip(gs).enumerate() {
            let limit = budget(xs, i);
            let err = (got - want).abs();
            assert!(err <= limit, "{} block {b} index {i}: got {got}, want {want}, error {err} over {limit}", ty.name());
        }
    }
}

#[test]
fn q4_k_round_trip_budget() {
    check_k_quant_budget(GgmlType::Q4_K, &super_block_values(16, 9), |b, i| k_quant_budget(b, i / 32, 15.0));
}

#[test]
fn q5_k_round_trip_budget() {
    check_k_quant_budget(GgmlType::Q5_K, &super_block_values(16, 10), |b, i| k_quant_budget(b, i / 32, 31.0));
}

#[test]
fn q6_k_round_trip_budget() {
    // Each 16-weight sub-block's value of largest magnitude maps to -32: scale s = max / -32,
    // stored as an i8 multiple of d = largest |s| / 128 (f16), so off by half a step plus the
    // f16 error of 128 steps. Rounding costs half the stored scale S; a value at the far end
    // (x / S past 31.5) is clamped to 31, costing up to |S| plus 32 times the scale's error.
    check_k_quant_budget(GgmlType::Q6_K, &super_block_values(16, 11), |b, i| {
        let s = |sub: &[f32]| amax(sub) / 32.0;
        let d = b.chunks(16).fold(0f32, |m, sub| m.max(s(sub))) / 128.0;
        let scale_err = d / 2.0 + 128.0 * f16_err(d);
        s(&b[i / 16 * 16..][..16]) + scale_err + 32.0 * scale_err + f32_slack(amax(b))
    });
}

#[test]
fn constant_blocks_round_trip() {
    // A zero block has d = 0 in every format and must come back as zeros, not NaN.
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        assert_eq!(deq(ty, &quantize(ty, &[0.0; 512])), vec![0.0; 512], "{}", ty.name());
    }
    // Q4_1 stores a constant block as its minimum with d = 0.
    assert_eq!(deq(GgmlType::Q4_1, &quantize(GgmlType::Q4_1, &[-3.25; 32])), vec![-3.25; 32]);
}

#[test]
fn grids_on_the_codes_round_trip_exactly() {
    // Values already on a format's grid, with a scale f16 holds exactly, lose nothing; each grid
    // spans the whole code range.
    let q8: Vec<f32> = (0..32).map(|i| (i * 8 - 121) as f32 / 8.0).collect(); // q in -121..=127, d = 1/8
    let q4_0: Vec<f32> = (0..32).map(|i| ((i % 16) as f32 - 8.0) * 2.0).collect(); // max -16, d = 2
    let q4_1: Vec<f32> = (0..32).map(|i| (i % 16) as f32 - 8.0).collect(); // min -8, d = 1
    for (ty, x) in [(GgmlType::Q8_0, q8), (GgmlType::Q4_0, q4_0), (GgmlType::Q4_1, q4_1)] {
        assert_eq!(deq(ty, &quantize(ty, &x)), x, "{}", ty.name());
    }
}
