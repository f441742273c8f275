//! Every GPU kernel against the CPU reference (model/reference.rs, gguf/blocks.rs) on seeded
//! random inputs with odd sizes, on whatever adapter is present (llvmpipe in CI), under both
//! the adapter's limits and the WebGPU default limits.

mod common;

use common::{odd_k, randn, TYPES};

use radixlm::gguf::blocks::{dequantize, quantize};
use radixlm::gguf::GgmlType;
use radixlm::gpu::executor::{block_on, open};
use radixlm::gpu::ops::*;
use radixlm::gpu::readback::read_f32;
use radixlm::gpu::{Gpu, GpuWeight, HiRows, LimitsPolicy, StepParams};
use radixlm::model::config::FfnAct;
use radixlm::model::reference;
use radixlm::model::synthetic::SplitMix64;
use std::sync::OnceLock;

/// `k` rounded up to whole blocks of `ty`.
fn fit_k(ty: GgmlType, k: usize) -> usize {
    k.next_multiple_of(ty.block_len())
}

fn gpu(policy: LimitsPolicy) -> &'static Gpu {
    static ADAPTER: OnceLock<Gpu> = OnceLock::new();
    static DEFAULT: OnceLock<Gpu> = OnceLock::new();
    let cell = match policy {
        LimitsPolicy::Adapter => &ADAPTER,
        LimitsPolicy::WebGpuDefault => &DEFAULT,
    };
    cell.get_or_init(|| open(policy).expect("a WebGPU/Vulkan adapter (llvmpipe) is required for the kernel tests"))
}


/// Max |got - want| over max |want|: the normalised error for matmul-like outputs.
fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let (i, err) = got.iter().zip(want).map(|(g, w)| (g - w).abs()).enumerate().fold((0, 0f32), |a, (i, e)| if e > a.1 || e.is_nan() { (i, e) } else { a });
    assert!(err / scale <= tol, "{what}: index {i}: got {} want {} (normalised error {} > {tol})", got[i], want[i], err / scale);
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Submits one compute pass built by `f`.
fn run(gpu: &Gpu, f: impl FnOnce(&mut wgpu::ComputePass)) {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        f(&mut pass);
    }
    gpu.queue.submit([enc.finish()]);
}

fn read(gpu: &Gpu, buf: &wgpu::Buffer, count: usize) -> Vec<f32> {
    block_on(gpu, read_f32(gpu, buf, 0, count as u64)).unwrap()
}

/// A random (n, k) weight of type `ty`, returned with its dequantized f32 values.
fn random_weight(rng: &mut SplitMix64, ty: GgmlType, k: usize, n: usize) -> (Vec<u8>, Vec<f32>) {
    let data = quantize(ty, &randn(rng, k * n));
    let mut w = vec![0f32; k * n];
    dequantize(ty, &data, &mut w);
    (data, w)
}

#[allow(clippy::too_many_arguments)]
fn check_matmul(gpu: &Gpu, rng: &mut SplitMix64, shape: MatmulShape, ty: GgmlType, t: usize, k: usize, n: usize, max_part_bytes: Option<u64>, accumulate: bool) {
    let (data, w) = random_weight(rng, ty, k, n);
    let gw = match max_part_bytes {
        Some(m) => GpuWeight::upload_with_max_part_bytes(gpu, "w", ty, k, n, &data, m).unwrap(),
        None => GpuWeight::upload(gpu, "w", ty, k, n, &data).unwrap(),
    };
    if max_part_bytes.is_some() {
        assert!(gw.parts.len() > 1, "forced split produced one part");
    }
    let x = randn(rng, t * k);
    let y0 = randn(rng, t * n);
    let mut want = reference::matmul(&x, &w, k, n);
    if accumulate {
        want.iter_mut().zip(&y0).for_each(|(w, y)| *w += y);
    }
    let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
    let xb = gpu.upload("x", f32_bytes(&x));
    let yb = gpu.upload("y", f32_bytes(&y0));
    let op = Matmul::with_shape(gpu, shape, ty, k, n, accumulate);
    let b = op.bind(gpu, &step, &xb, &gw, &yb);
    run(gpu, |p| op.encode(p, &b, t as u32));
    let got = read(gpu, &yb, t * n);
    assert_close(&format!("matmul {} T={t} K={k} N={n} acc={accumulate} {shape:?}", ty.name()), &got, &want, tolerance(shape, t));
}

/// The GPU shape with f16 prefill tiles, and with decode's sums added by subgroup operations.
const WIDE_F16: MatmulShape = MatmulShape::Wide { f16_tiles: true, subgroups: false };
const WIDE_SUBGROUP: MatmulShape = MatmulShape::Wide { f16_tiles: false, subgroups: true };

/// A product's bound against the reference: f32 sums in another order (~1e-6 relative), or
/// with prefill tiles in f16 each weight and activation rounded to f16 once (2^-11 relative).
fn tolerance(shape: MatmulShape, t: usize) -> f32 {
    let f16_tiles = matches!(shape, MatmulShape::Wide { f16_tiles: true, .. });
    if f16_tiles && t > radixlm::gpu::ops::matmul::MATVEC_MAX_T as usize { 2e-3 } else { 1e-4 }
}

/// The real-GPU product shapes this device runs: the portable one, f16 tiles where it has
/// shader-f16 and subgroup sums where it has subgroups, both of which llvmpipe (the test
/// adapter of CI) has.
fn gpu_shapes(gpu: &Gpu) -> Vec<MatmulShape> {
    let features = gpu.device.features();
    let (f16, subgroups) = (features.contains(wgpu::Features::SHADER_F16), features.contains(wgpu::Features::SUBGROUP));
    assert!((f16 && subgroups) || !gpu.info.name.contains("llvmpipe"), "llvmpipe without shader-f16 or subgroups");
    [(MatmulShape::WIDE, true), (WIDE_F16, f16), (WIDE_SUBGROUP, subgroups)].into_iter().filter_map(|(s, has)| has.then_some(s)).collect()
}

#[test]
fn matmul_every_type_and_shape() {
    // Each (type, K, N, accumulate) is its own pipeline and llvmpipe compiles slowly, so the
    // odd sizes are spread over two shapes per type rather than crossed.
    let mut rng = SplitMix64(1);
    for policy in [LimitsPolicy::Adapter, LimitsPolicy::WebGpuDefault] {
        let gpu = gpu(policy);
        let types: &[GgmlType] = if policy == LimitsPolicy::Adapter { &TYPES } else { &[GgmlType::F32, GgmlType::Q4_0] };
        for &ty in types {
            let odd_k = odd_k(ty);
            for t in [1, 3, 7, 33, 70] {
                check_matmul(gpu, &mut rng, MatmulShape::Rows, ty, t, odd_k, 257, None, false);
                check_matmul(gpu, &mut rng, MatmulShape::Rows, ty, t, fit_k(ty, 96), 64, None, true);
            }
            // An even number of blocks per row: Q4_0 and Q8_0 rows are then read by words.
            for t in [1, 7] {
                check_matmul(gpu, &mut rng, MatmulShape::Rows, ty, t, fit_k(ty, 128), 37, None, false);
            }
            // Forced multi-part weights: parts of 5 rows plus a short last one, both kernels.
            for t in [1, 33] {
                let row = ty.row_bytes(fit_k(ty, 96)).unwrap() as u64;
                check_matmul(gpu, &mut rng, MatmulShape::Rows, ty, t, fit_k(ty, 96), 64, Some(5 * row + 3), true);
            }
            // The GPU shapes: decode (up to MATVEC_MAX_T tokens) and prefill tiles (64 tokens,
            // 64 rows); odd rows and row lengths, parts.
            for t in [1, 4, 5, 70] {
                check_matmul(gpu, &mut rng, MatmulShape::WIDE, ty, t, odd_k, 257, None, false);
                let row = ty.row_bytes(fit_k(ty, 96)).unwrap() as u64;
                check_matmul(gpu, &mut rng, MatmulShape::WIDE, ty, t, fit_k(ty, 96), 64, Some(5 * row + 3), true);
            }
            // Decode sums by subgroup operations; prefill tiles in f16.
            if gpu_shapes(gpu).contains(&WIDE_SUBGROUP) {
                for t in [1, 4] {
                    check_matmul(gpu, &mut rng, WIDE_SUBGROUP, ty, t, odd_k, 257, None, false);
                }
            }
            if gpu_shapes(gpu).contains(&WIDE_F16) {
                check_matmul(gpu, &mut rng, WIDE_F16, ty, 70, odd_k, 257, None, false);
                check_matmul(gpu, &mut rng, WIDE_F16, ty, 33, fit_k(ty, 96), 64, None, true);
            }
        }
    }
}

#[test]
fn one_token_products_per_block_type() {
    // matvec_blocks: rows of 4 to 256 units (4 to 256 lanes a row, some lanes taking one unit
    // more than others; workgroups of 64 lanes or of one group), rows past the last workgroup's,
    // accumulation, weights in parts.
    let mut rng = SplitMix64(13);
    let gpu = gpu(LimitsPolicy::Adapter);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        // An even number of blocks: rows of whole words.
        let fit = |k: usize| k.next_multiple_of(2 * ty.block_len());
        for (k, accumulate) in [(fit(128), false), (fit(576), true), (fit(2560), false), (fit(8192), true)] {
            assert!(BlockLanes::for_weight(ty, k).is_some(), "{ty:?} K={k} is not read by matvec_blocks");
            check_matmul(gpu, &mut rng, MatmulShape::WIDE, ty, 1, k, 75, None, accumulate);
        }
        let k = fit(512);
        let row = ty.row_bytes(k).unwrap() as u64;
        check_matmul(gpu, &mut rng, MatmulShape::WIDE, ty, 1, k, 64, Some(21 * row), true);
    }
}

#[test]
fn matmul_with_the_rmsnorm_prologue() {
    let mut rng = SplitMix64(12);
    let gpu = gpu(LimitsPolicy::Adapter);
    for ty in TYPES {
        // Odd row lengths reach the tails; 128 reads Q4_0 and Q8_0 rows by block pairs.
        for k in [odd_k(ty), fit_k(ty, 128)] {
            let n = 37;
            let (data, w) = random_weight(&mut rng, ty, k, n);
            let gw = GpuWeight::upload(gpu, "w", ty, k, n, &data).unwrap();
            let g: Vec<f32> = randn(&mut rng, k).iter().map(|v| 1.0 + 0.3 * v).collect();
            for (shape, t) in [(MatmulShape::WIDE, 1), (MatmulShape::WIDE, 4), (MatmulShape::WIDE, 33), (WIDE_F16, 33), (WIDE_SUBGROUP, 4), (MatmulShape::Rows, 3), (MatmulShape::Rows, 33)] {
                if !gpu_shapes(gpu).contains(&shape) && shape != MatmulShape::Rows {
                    continue;
                }
                // Rows of different scales: the prologue must normalise each on its own.
                let x: Vec<f32> = randn(&mut rng, t * k).iter().enumerate().map(|(i, v)| v * (1 + i / k) as f32).collect();
                let want = reference::matmul(&reference::rmsnorm(&x, &g, 1e-5), &w, k, n);
                let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
                let (xb, gb, yb) = (gpu.upload("x", f32_bytes(&x)), gpu.upload("g", f32_bytes(&g)), gpu.storage("y", (t * n * 4) as u64));
                let op = Matmul::with_norm(gpu, shape, ty, k, n, false, 1e-5);
                let b = op.bind_normed(gpu, &step, &xb, &gb, &gw, &yb);
                run(gpu, |p| op.encode(p, &b, t as u32));
                assert_close(&format!("rmsnorm + matmul {} T={t} K={k} {shape:?}", ty.name()), &read(gpu, &yb, t * n), &want, tolerance(shape, t));
            }
        }
    }
}

#[test]
fn rmsnorm_prologue_with_residual_stream_outliers_past_f16() {
    // Outliers of 1e5 in the residual stream (large models have them): times norm_w they pass
    // f16's 65,504, so f16 tiles must normalise before rounding (tile_f16.wgsl TILE_PRENORM).
    let mut rng = SplitMix64(31);
    let gpu = gpu(LimitsPolicy::Adapter);
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16] {
        let (k, n, t) = (fit_k(ty, 512), 37, 33);
        let (data, w) = random_weight(&mut rng, ty, k, n);
        let gw = GpuWeight::upload(gpu, "w", ty, k, n, &data).unwrap();
        let g: Vec<f32> = randn(&mut rng, k).iter().map(|v| 1.0 + 0.3 * v).collect();
        let x: Vec<f32> = randn(&mut rng, t * k).iter().enumerate().map(|(i, v)| if i % 97 == 5 { 1e5 * v.signum() } else { *v }).collect();
        let want = reference::matmul(&reference::rmsnorm(&x, &g, 1e-5), &w, k, n);
        for shape in [MatmulShape::WIDE, WIDE_F16, MatmulShape::Rows] {
            if !gpu_shapes(gpu).contains(&shape) && shape != MatmulShape::Rows {
                continue;
            }
            let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
            let (xb, gb, yb) = (gpu.upload("x", f32_bytes(&x)), gpu.upload("g", f32_bytes(&g)), gpu.storage("y", (t * n * 4) as u64));
            let op = Matmul::with_norm(gpu, shape, ty, k, n, false, 1e-5);
            let b = op.bind_normed(gpu, &step, &xb, &gb, &gw, &yb);
            run(gpu, |p| op.encode(p, &b, t as u32));
            let got = read(gpu, &yb, t * n);
            assert!(got.iter().all(|v| v.is_finite()), "{} {shape:?}: non-finite outputs", ty.name());
            assert_close(&format!("rmsnorm + matmul with outliers {} {shape:?}", ty.name()), &got, &want, tolerance(shape, t));
        }
    }
}

#[test]
fn gated_matmul_is_the_activated_gate_times_up() {
    let mut rng = SplitMix64(13);
    let gpu = gpu(LimitsPolicy::Adapter);
    for ty in TYPES {
        let (k, f) = (odd_k(ty), 37);
        let (gate_data, gate) = random_weight(&mut rng, ty, k, f);
        let (up_data, up) = random_weight(&mut rng, ty, k, f);
        let gw = GpuWeight::upload(gpu, "gate_up", ty, k, 2 * f, &[gate_data, up_data].concat()).unwrap();
        let g: Vec<f32> = randn(&mut rng, k).iter().map(|v| 1.0 + 0.3 * v).collect();
        for (shape, t) in [(MatmulShape::WIDE, 1), (MatmulShape::WIDE, 3), (MatmulShape::WIDE, 40), (WIDE_F16, 40), (WIDE_SUBGROUP, 3), (MatmulShape::Rows, 2), (MatmulShape::Rows, 33)] {
            if !gpu_shapes(gpu).contains(&shape) && shape != MatmulShape::Rows {
                continue;
            }
            let x = randn(&mut rng, t * k);
            let h = reference::rmsnorm(&x, &g, 1e-5);
            // SiLU, and GELU on half the types (gemma3).
            let act = if ty.id() % 2 == 0 { FfnAct::Silu } else { FfnAct::GeluTanh };
            let want = reference::glu(act, &reference::matmul(&h, &gate, k, f), &reference::matmul(&h, &up, k, f));
            let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
            let (xb, gb, yb) = (gpu.upload("x", f32_bytes(&x)), gpu.upload("g", f32_bytes(&g)), gpu.storage("y", (t * f * 4) as u64));
            let op = Matmul::gated(gpu, shape, ty, k, f, 1e-5, act);
            let b = op.bind_normed(gpu, &step, &xb, &gb, &gw, &yb);
            run(gpu, |p| op.encode(p, &b, t as u32));
            assert_close(&format!("gated matmul {} {act:?} T={t} {shape:?}", ty.name()), &read(gpu, &yb, t * f), &want, tolerance(shape, t));
        }
    }
}

/// A shuffled page table of `n_pages` page ids from a pool of 2·n_pages + 1, and the pool size.
fn shuffled_pages(rng: &mut SplitMix64, n_pages: usize) -> (Vec<u32>, usize) {
    let pool = 2 * n_pages + 1;
    let mut ids: Vec<u32> = (0..pool as u32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    ids.truncate(n_pages);
    (ids, pool)
}

/// Positions 0..len of a paged f16 cache as f32 (len, kvd): each position from its page slot.
fn read_cache(gpu: &Gpu, cache: &wgpu::Buffer, page_table: &[u32], page: usize, kvd: usize, len: usize) -> Vec<f32> {
    let words = block_on(gpu, radixlm::gpu::readback::read_u32(gpu, cache, 0, cache.size() / 4)).unwrap();
    let mut out = Vec::with_capacity(len * kvd);
    for p in 0..len {
        let base = (page_table[p / page] as usize * page + p % page) * kvd / 2;
        for &w in &words[base..base + kvd / 2] {
            out.extend([w as u16, (w >> 16) as u16].map(|x| half::f16::from_bits(x).to_f32()));
        }
    }
    out
}

/// Which model's q/k/v step an attention-input check runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum QkvStep {
    /// llama: RoPE on adjacent rows.
    Llama,
    /// qwen2: biases on q, k and v, RoPE pairing rows i and i + D/2 of each head.
    Qwen2,
    /// qwen3: each head of q and k RMS-normalised and scaled (qk_norm.wgsl), then NEOX RoPE.
    Qwen3,
}

/// Each of `types` for q, k and v alike, at a row length of odd blocks.
fn one_type(types: &[GgmlType]) -> Vec<([GgmlType; 3], usize)> {
    types.iter().map(|&ty| ([ty; 3], odd_k(ty))).collect()
}

/// 3 query heads over 1 KV head of 32 (a GQA group of 3).
const HEADS_32: (usize, usize, usize) = (3, 1, 32);
/// 2 query heads over 1 KV head of 64: k starts at row 128 and v at 192, multiples of 64, so
/// a weight can change type at either (gpu/ops/matmul.rs `reads_two_types`).
const HEADS_64: (usize, usize, usize) = (2, 1, 64);

#[test]
fn attention_input_rotates_q_and_k_into_the_kv_pages() {
    check_attention_input(&one_type(&TYPES), QkvStep::Llama, 14, HEADS_32);
}

#[test]
fn attention_input_neox_rope_with_biases() {
    check_attention_input(&one_type(&[GgmlType::F32, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K]), QkvStep::Qwen2, 15, HEADS_32);
}

#[test]
fn attention_input_with_per_head_q_and_k_norms() {
    check_attention_input(&one_type(&[GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K]), QkvStep::Qwen3, 16, HEADS_32);
}

/// q/k/v weights of two types in one product, as the quantization mixes make them: Q4_K_M's
/// Q6_K v, Gemma 3 270M Q4_K_M's Q5_0 q and k with a Q8_0 v (K = 640), and Q4_0 with Q8_0 in
/// rows that are not whole words (matvec_wide's and the tiles' reads at any byte).
#[test]
fn attention_input_of_two_types_in_one_product() {
    use GgmlType::*;
    check_attention_input(&[([Q4_K, Q4_K, Q6_K], 512), ([Q5_0, Q5_0, Q8_0], 640), ([Q4_0, Q4_0, Q8_0], 96)], QkvStep::Llama, 17, HEADS_64);
}

/// The second type from k's first row on, with NEOX RoPE's rows reordered within each head and
/// the biases.
#[test]
fn attention_input_of_two_types_with_neox_rope_and_biases() {
    use GgmlType::*;
    check_attention_input(&[([Q4_K, Q6_K, Q6_K], 512)], QkvStep::Qwen2, 18, HEADS_64);
}

/// NEOX products emit each head's rows in the order that makes RoPE pairs adjacent: output row
/// 2i from row i, 2i + 1 from row i + D/2 (matmul.wgsl ROPE_NEOX). `x` is (T, heads·D).
fn neox_order(x: &[f32], d: usize) -> Vec<f32> {
    x.chunks(d).flat_map(|head| (0..d).map(move |s| head[s / 2 + (s % 2) * (d / 2)])).collect()
}

/// The fused q/k/v product against the reference: norm, product, (biases), (per-head q/k norms,
/// a second op), RoPE (llama's or NEOX) and the KV-page write, for each case (q's, k's and v's
/// types, and the row length), both shapes, one weight and three (cases of one type: three
/// weights apart are each of one type, which those cases check).
fn check_attention_input(cases: &[([GgmlType; 3], usize)], step_kind: QkvStep, seed: u64, (h, hkv, d): (usize, usize, usize)) {
    let (qwen2, qk_norm) = (step_kind == QkvStep::Qwen2, step_kind == QkvStep::Qwen3);
    let neox = qwen2 || qk_norm;
    let mut rng = SplitMix64(seed);
    let gpu = gpu(LimitsPolicy::Adapter);
    // Pages of 16 tokens.
    let (page, base) = (16, 10000.0);
    // Frequencies divided by Llama 3.x-like factors (1 for the fast pairs up to 8 for the slow).
    let factors: Vec<f32> = (0..d / 2).map(|i| 1.0 + (7 * i / (d / 2 - 1)) as f32).collect();
    let freqs = radixlm::model::rope::freqs(d, base, 1.0, Some(&factors));
    let (nq, nkv) = (h * d, hkv * d);
    let biases: Vec<Vec<f32>> = [nq, nkv, nkv].iter().map(|&n| randn(&mut rng, n)).collect();
    let bias_buffer = qwen2.then(|| gpu.upload("qkv_bias", f32_bytes(&biases.concat())));
    let norms: Vec<Vec<f32>> = (0..2).map(|_| randn(&mut rng, d).iter().map(|v| 1.0 + 0.3 * v).collect()).collect();
    let norm_buffers: Vec<wgpu::Buffer> = norms.iter().map(|n| gpu.upload("qk_norm", f32_bytes(n))).collect();
    let rope_table = RopeTable::new(gpu, &freqs);
    for &(types, k) in cases {
        let ty = types[0];
        let weights: Vec<(Vec<u8>, Vec<f32>)> = [nq, nkv, nkv].iter().zip(types).map(|(&n, ty)| random_weight(&mut rng, ty, k, n)).collect();
        let whole: Vec<u8> = weights.iter().flat_map(|(d, _)| d.clone()).collect();
        let g: Vec<f32> = randn(&mut rng, k).iter().map(|v| 1.0 + 0.3 * v).collect();
        let gb = gpu.upload("g", f32_bytes(&g));
        for (shape, t, start) in [(MatmulShape::WIDE, 1, 0), (MatmulShape::WIDE, 4, 1500), (MatmulShape::WIDE, 37, 30), (WIDE_F16, 37, 30), (WIDE_SUBGROUP, 2, 600), (MatmulShape::Rows, 2, 17), (MatmulShape::Rows, 33, 5), (MatmulShape::Rows, 1, 1500)] {
            if !gpu_shapes(gpu).contains(&shape) && shape != MatmulShape::Rows {
                continue;
            }
            let x = randn(&mut rng, t * k);
            let hn = reference::rmsnorm(&x, &g, 1e-5);
            let [mut want_q, mut want_k, mut want_v] = [0, 1, 2].map(|i| reference::matmul(&hn, &weights[i].1, k, [nq, nkv, nkv][i]));
            if qwen2 {
                reference::add_bias(&mut want_q, &biases[0]);
                reference::add_bias(&mut want_k, &biases[1]);
                reference::add_bias(&mut want_v, &biases[2]);
            }
            if qk_norm {
                want_q = reference::rmsnorm(&want_q, &norms[0], 1e-5);
                want_k = reference::rmsnorm(&want_k, &norms[1], 1e-5);
            }
            if neox {
                reference::rope_neox(&mut want_q, h, d, start, &freqs);
                reference::rope_neox(&mut want_k, hkv, d, start, &freqs);
                want_q = neox_order(&want_q, d);
                want_k = neox_order(&want_k, d);
            } else {
                reference::rope(&mut want_q, h, d, start, &freqs);
                reference::rope(&mut want_k, hkv, d, start, &freqs);
            }
            let (page_table, pool) = shuffled_pages(&mut rng, (start + t).div_ceil(page));
            let ptb = gpu.upload("page_table", bytemuck::cast_slice(&page_table));
            let step = gpu.uniform("step", &StepParams::new(t as u32, start as u32));
            let xb = gpu.upload("x", f32_bytes(&x));
            // One product over the whole q/k/v weight, and three over its parts.
            let one = match types.iter().position(|&t| t != ty) {
                None => GpuWeight::upload(gpu, "qkv", ty, k, nq + 2 * nkv, &whole).unwrap(),
                Some(i) => {
                    let hi = HiRows { first_row: [0, nq, nq + nkv][i], ty: types[i] };
                    assert!(reads_two_types(ty, k, hi), "{types:?} at K={k}: not one product");
                    GpuWeight::upload_two_types(gpu, "qkv", ty, k, nq + 2 * nkv, hi, &whole).unwrap().unwrap()
                }
            };
            let mut layouts = vec![("one weight", vec![(one, 0)])];
            if types.iter().all(|&t| t == ty) {
                let apart = [(0, nq, 0), (1, nkv, nq), (2, nkv, nq + nkv)].map(|(i, n, first)| (GpuWeight::upload(gpu, "w", ty, k, n, &weights[i].0).unwrap(), first));
                layouts.push(("three weights", apart.into()));
            }
            for (layout, products) in layouts {
                let qb = gpu.storage("q", (t * nq * 4) as u64);
                // With q/k norms the product writes q and k as they are, for QkNorm.
                let raw = gpu.storage("qk_raw", (t * (nq + nkv) * 4) as u64);
                let cache_bytes = (pool * page * nkv * 2) as u64;
                let (kc, vc) = (gpu.storage("k_cache", cache_bytes), gpu.storage("v_cache", cache_bytes));
                for (w, first_row) in &products {
                    let at = AttentionInput { n_q: nq, n_kv: nkv, first_row: *first_row, head_dim: d, rope_freqs: &rope_table, rope_neox: neox, bias: qwen2, qk_norm, page_size: page };
                    let op = Matmul::attention_input(gpu, shape, w, 1e-5, at);
                    let b = op.bind_attention_input(gpu, &step, &xb, &gb, w, if qk_norm { &raw } else { &qb }, &ptb, [&kc, &vc], bias_buffer.as_ref());
                    run(gpu, |p| op.encode(p, &b, t as u32));
                }
                if qk_norm {
                    let op = QkNorm::new(gpu, nq, nkv, d, page, 1e-5, neox);
                    let b = op.bind(gpu, &step, &raw, &norm_buffers[0], &norm_buffers[1], &ptb, &qb, &kc, &rope_table);
                    run(gpu, |p| op.encode(p, &b, t as u32));
                }
                let what = |out: &str| format!("attention input {types:?} ({layout}, {step_kind:?}) T={t} start={start} {shape:?}: {out}");
                // The angle's f32 rounding grows with the position (as in the rope bound below);
                // the caches add f16 rounding (2^-11 relative).
                let tol = 2e-5 + (start + t) as f32 * 4e-8 + tolerance(shape, t) - 1e-4;
                assert_close(&what("q"), &read(gpu, &qb, t * nq), &want_q, tol);
                let cached = |c| read_cache(gpu, c, &page_table, page, nkv, start + t)[start * nkv..].to_vec();
                assert_close(&what("k cache"), &cached(&kc), &want_k, tol + 1e-3);
                assert_close(&what("v cache"), &cached(&vc), &want_v, 1e-4 + 1e-3);
            }
        }
    }
}

#[test]
fn matmul_at_the_default_models_ffn_size() {
    // 512×576 · (1536×576)ᵀ in Q4_1, SmolLM2-135M's FFN up projection, in the adapter's shape.
    let gpu = gpu(LimitsPolicy::Adapter);
    let mut rng = SplitMix64(2);
    let (t, k, n) = (512, 576, 1536);
    let (data, w) = random_weight(&mut rng, GgmlType::Q4_1, k, n);
    let gw = GpuWeight::upload(gpu, "w", GgmlType::Q4_1, k, n, &data).unwrap();
    let x = randn(&mut rng, t * k);
    let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
    let xb = gpu.upload("x", f32_bytes(&x));
    let yb = gpu.storage("y", (t * n * 4) as u64);
    let op = Matmul::new(gpu, GgmlType::Q4_1, k, n, false);
    let b = op.bind(gpu, &step, &xb, &gw, &yb);
    run(gpu, |p| op.encode(p, &b, t as u32));
    let tol = tolerance(KernelShapes::for_adapter(gpu).matmul, t);
    assert_close("matmul 512x576x1536", &read(gpu, &yb, t * n), &reference::matmul(&x, &w, k, n), tol);
}

/// Elementwise: |got - want| <= rel · |want| + abs at every index.
fn assert_elementwise(what: &str, got: &[f32], want: &[f32], rel: f32, abs: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= rel * w.abs() + abs, "{what}: index {i}: got {g} want {w}");
    }
}

#[test]
fn every_wgsl_file_validates() {
    use wgpu::naga;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shaders-wgsl");
    let shared = ["common.wgsl", "blocks.wgsl", "pick_filter.wgsl", "rope.wgsl", "act.wgsl", "tile_f32.wgsl", "tile_f16.wgsl", "matvec_subgroup.wgsl", "matmul_io.wgsl"];
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(shared.contains(&name.as_str()) || KERNELS.iter().any(|(f, _)| *f == name), "{name} has no dispatcher in gpu::ops::KERNELS");
    }
    for (file, kernel) in KERNELS {
        let module = naga::front::wgsl::parse_str(kernel.source).unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(kernel.source)));
        // pack2x16float/unpack2x16float are core WGSL; naga lists them as a capability. f16 and
        // subgroups are the variants' (shader-f16, subgroups).
        let capabilities = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32 | naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::SUBGROUP;
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
            .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
            .subgroup_operations(naga::valid::SubgroupOperationSet::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(kernel.source)));
    }
}

#[test]
fn embed_every_type_with_split_table() {
    let mut rng = SplitMix64(3);
    let gpu = gpu(LimitsPolicy::Adapter);
    let v = 37;
    for ty in TYPES {
        let c = if ty.block_len() == 1 { 257 } else { fit_k(ty, 96) };
        let (data, table) = random_weight(&mut rng, ty, c, v);
        let row = ty.row_bytes(c).unwrap() as u64;
        let gw = GpuWeight::upload_with_max_part_bytes(gpu, "token_embd", ty, c, v, &data, 8 * row).unwrap();
        assert_eq!(gw.parts.len(), 5);
        // Scaled as gemma3's are, on every other type.
        let scale = if ty.id() % 2 == 0 { 1.0 } else { (c as f32).sqrt() };
        let op = Embed::new(gpu, ty, c, scale);
        for t in [1usize, 7, 33] {
            let ids: Vec<u32> = (0..t).map(|_| (rng.next_u64() % v as u64) as u32).collect();
            let want: Vec<f32> = ids.iter().flat_map(|&id| table[id as usize * c..][..c].iter().map(|v| v * scale)).collect();
            let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
            let idb = gpu.upload("ids", bytemuck::cast_slice(&ids));
            let out = gpu.storage("out", (t * c * 4) as u64);
            let b = op.bind(gpu, &step, &idb, &gw, &out);
            run(gpu, |p| op.encode(p, &b, t as u32));
            // The same dequantization arithmetic as the CPU: exact up to f32 rounding.
            assert_elementwise(&format!("embed {} T={t}", ty.name()), &read(gpu, &out, t * c), &want, 1e-6, 1e-6);
        }
    }
}

#[test]
fn rmsnorm_rows_and_last_row() {
    let mut rng = SplitMix64(4);
    for policy in [LimitsPolicy::Adapter, LimitsPolicy::WebGpuDefault] {
        let gpu = gpu(policy);
        for c in [64usize, 257, 576] {
            let w = randn(&mut rng, c);
            let wb = gpu.upload("w", f32_bytes(&w));
            for t in [1usize, 7, 33] {
                let x = randn(&mut rng, t * c);
                let want = reference::rmsnorm(&x, &w, 1e-5);
                let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
                let xb = gpu.upload("x", f32_bytes(&x));
                let out = gpu.storage("out", (t * c * 4) as u64);
                for last in [false, true] {
                    let op = RmsNorm::new(gpu, c, 1e-5, last);
                    let b = op.bind(gpu, &step, &xb, &wb, &out);
                    run(gpu, |p| op.encode(p, &b, t as u32));
                    let (got, want) = if last { (read(gpu, &out, c), &want[(t - 1) * c..]) } else { (read(gpu, &out, t * c), &want[..]) };
                    // A tree sum instead of a sequential one: a few f32 ulps on the scale.
                    assert_elementwise(&format!("rmsnorm C={c} T={t} last={last}"), &got, want, 1e-5, 1e-6);
                }
                // A post norm: the residual stream += the normalised rows.
                let residual = randn(&mut rng, t * c);
                let rb = gpu.upload("residual", f32_bytes(&residual));
                let op = RmsNorm::add(gpu, c, 1e-5);
                let b = op.bind(gpu, &step, &xb, &wb, &rb);
                run(gpu, |p| op.encode(p, &b, t as u32));
                // The sum's error is the normalised term's: bounded by the terms, not by their sum.
                let got = read(gpu, &rb, t * c);
                for (i, ((g, r), w)) in got.iter().zip(&residual).zip(&want).enumerate() {
                    assert!((g - (r + w)).abs() <= 1e-5 * (r.abs() + w.abs()) + 1e-6, "rmsnorm add C={c} T={t}: index {i}: got {g} want {}", r + w);
                }
            }
        }
    }
}

#[test]
fn glu_elementwise() {
    let mut rng = SplitMix64(6);
    let gpu = gpu(LimitsPolicy::WebGpuDefault);
    let f = 257;
    for act in [FfnAct::Silu, FfnAct::GeluTanh] {
        let op = Glu::new(gpu, f, act);
        for t in [1usize, 7, 33] {
            // Gates out to ±12: GELU's tanh saturates there.
            let g: Vec<f32> = randn(&mut rng, t * f).iter().map(|v| v * 4.0).collect();
            let u = randn(&mut rng, t * f);
            let step = gpu.uniform("step", &StepParams::new(t as u32, 0));
            let (gb, ub, out) = (gpu.upload("g", f32_bytes(&g)), gpu.upload("u", f32_bytes(&u)), gpu.storage("out", (t * f * 4) as u64));
            let b = op.bind(gpu, &step, &gb, &ub, &out);
            run(gpu, |p| op.encode(p, &b, t as u32));
            assert_elementwise(&format!("glu {act:?} T={t}"), &read(gpu, &out, t * f), &reference::glu(act, &g, &u), 1e-5, 1e-5);
        }
    }
}

/// A grammar's bitmask over `v` ids allowing those `allowed` says (bit i % 32 of word i / 32).
fn bitmask(v: usize, allowed: impl Fn(usize) -> bool) -> Vec<u32> {
    (0..v.div_ceil(32)).map(|w| (0..32).filter(|b| w * 32 + b < v && allowed(w * 32 + b)).fold(0u32, |word, b| word | 1 << b)).collect()
}

/// Runs top2.wgsl over `logits`, skipping `banned[..n_banned]` and, with a mask, the ids clear in it.
fn top2(gpu: &Gpu, logits: &[f32], banned: &[u32], n_banned: u32, mask: Option<&[u32]>) -> Top2 {
    let op = Top2Op::new(gpu, logits.len());
    let params = gpu.uniform("pick", &PickParams { n_banned, masked: mask.is_some() as u32, ..Default::default() });
    let (lb, bb, out) = (gpu.upload("logits", f32_bytes(logits)), gpu.upload("banned", bytemuck::cast_slice(banned)), gpu.storage("out", TOP2_BYTES));
    let ab = gpu.upload("allowed", bytemuck::cast_slice(mask.unwrap_or(&[0])));
    let b = op.bind(gpu, &params, &lb, &bb, &ab, &out);
    run(gpu, |p| op.encode(p, &b));
    let words = block_on(gpu, radixlm::gpu::readback::read_u32(gpu, &out, 0, 4)).unwrap();
    Top2::from_words([words[0], words[1], words[2], words[3]])
}

#[test]
fn top2_matches_the_cpu_pick_with_ties_bans_and_non_finite_logits() {
    let mut rng = SplitMix64(7);
    let gpu = gpu(LimitsPolicy::Adapter);
    let v = 49152 + 7;
    let mut logits = randn(&mut rng, v);
    logits[40001] = 9.0;
    logits[40000] = 9.0;
    logits[123] = 8.5;
    logits[7] = f32::NAN;
    let cpu = |l: &[f32]| radixlm::engine::sampling::argmax(l);
    // A tie: the lowest index, and a gap of 0 (the runner-up is the other 9.0).
    let t = top2(gpu, &logits, &[0], 0, None);
    assert_eq!((t.index, t.best, t.second), (Some(40000), 9.0, 9.0));
    assert_eq!(t.index, Some(cpu(&logits)));
    // Banning the tied pair: 123 wins, its lead over the rest as on the CPU.
    let t = top2(gpu, &logits, &[40000, 40001], 2, None);
    let mut masked = logits.clone();
    masked[40000] = f32::NEG_INFINITY;
    masked[40001] = f32::NEG_INFINITY;
    let mut sorted: Vec<f32> = masked.iter().copied().filter(|x| x.is_finite()).collect();
    sorted.sort_by(|a, b| b.total_cmp(a));
    assert_eq!((t.index, t.best, t.second), (Some(123), 8.5, sorted[1]));
    assert_eq!(t.index, Some(cpu(&masked)));
    // Bans apply only up to n_banned.
    assert_eq!(top2(gpu, &logits, &[40000, 40001], 1, None).index, Some(40001));
    // No finite logit: no index.
    let t = top2(gpu, &[f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY], &[0], 0, None);
    assert_eq!(t.index, None);
    // One candidate: an infinite gap.
    let t = top2(gpu, &[f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY], &[0], 0, None);
    assert_eq!((t.index, t.gap()), (Some(1), f32::INFINITY));
    // A grammar's mask: every third id and the last word's tail; with a ban on top of it.
    let admits = |i: usize| i % 3 == 1 || i >= v - 5;
    let mask = bitmask(v, admits);
    let masked: Vec<f32> = logits.iter().enumerate().map(|(i, &l)| if admits(i) { l } else { f32::NEG_INFINITY }).collect();
    let want = radixlm::engine::sampling::top2(&masked, |_| true);
    let t = top2(gpu, &logits, &[0], 0, Some(&mask));
    assert_eq!((t.index, t.best, t.second), (want.index, want.best, want.second));
    assert_eq!(t.index, Some(40000), "40000 = 3·13333 + 1 is allowed");
    let t = top2(gpu, &logits, &[40000], 1, Some(&mask));
    assert_eq!(t.index, Some(radixlm::engine::sampling::top2(&masked, |i| i != 40000).index.unwrap()));
    // A mask allowing one id picks it whatever its logit; one allowing none picks nothing.
    assert_eq!(top2(gpu, &logits, &[0], 0, Some(&bitmask(v, |i| i == v - 1))).index, Some(v as u32 - 1));
    assert_eq!(top2(gpu, &logits, &[0], 0, Some(&bitmask(v, |_| false))).index, None);
}

/// Runs topk.wgsl's passes over `logits`, skipping `banned[..n_banned]` and, with a mask, the ids clear in it.
fn top_k(gpu: &Gpu, logits: &[f32], banned: &[u32], n_banned: u32, mask: Option<&[u32]>) -> Vec<(u32, f32)> {
    let op = TopKOp::new(gpu, logits.len());
    let (lb, bb) = (gpu.upload("logits", f32_bytes(logits)), gpu.upload("banned", bytemuck::cast_slice(banned)));
    let ab = gpu.upload("allowed", bytemuck::cast_slice(mask.unwrap_or(&[0])));
    let b = op.bind(gpu, &lb, &bb, &ab);
    op.set_filter(gpu, &b, n_banned, mask.is_some());
    run(gpu, |p| op.encode(p, &b));
    let words = block_on(gpu, radixlm::gpu::readback::read_u32(gpu, &b.out, 0, TOPK_BYTES / 4)).unwrap();
    radixlm::gpu::ops::topk::candidates(&words)
}

/// The CPU's order: largest logit first, the lower id first on ties; the first MAX_TOP_K.
fn cpu_top_k(logits: &[f32], banned: &[u32]) -> Vec<(u32, f32)> {
    let mut c: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).filter(|(i, l)| !banned.contains(i) && l.is_finite()).collect();
    c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    c.truncate(MAX_TOP_K);
    c
}

#[test]
fn top_k_matches_the_cpu_order_over_one_two_and_three_passes() {
    let mut rng = SplitMix64(11);
    let gpu = gpu(LimitsPolicy::Adapter);
    for v in [10, 1000, 49152 + 7, 128256] {
        let mut logits = randn(&mut rng, v);
        // Ties inside and at the edge of the kept set, a NaN and -inf, banned ids among the best.
        if v > 100 {
            for i in [5, 17, v - 1] {
                logits[i] = 4.5;
            }
            logits[40] = f32::NAN;
            logits[41] = f32::NEG_INFINITY;
            logits[60] = 9.0;
        }
        let banned = [60, 17];
        assert_eq!(top_k(gpu, &logits, &banned, 0, None), cpu_top_k(&logits, &[]), "V={v}");
        assert_eq!(top_k(gpu, &logits, &banned, 2, None), cpu_top_k(&logits, &banned), "V={v}, banned");
        // A grammar's mask (ids with bit 2 set, 60 among them), then with the bans as well: the
        // kept set is the mask's best, the forbidden ids as if -inf.
        let admits = |i: usize| i & 4 != 0;
        let masked: Vec<f32> = logits.iter().enumerate().map(|(i, &l)| if admits(i) { l } else { f32::NEG_INFINITY }).collect();
        let mask = bitmask(v, admits);
        assert_eq!(top_k(gpu, &logits, &banned, 0, Some(&mask)), cpu_top_k(&masked, &[]), "V={v}, masked");
        assert_eq!(top_k(gpu, &logits, &banned, 2, Some(&mask)), cpu_top_k(&masked, &banned), "V={v}, masked and banned");
    }
}

fn f16_round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

/// Fills positions 0..start + t of a paged f16 cache (a shuffled page table) with random keys
/// and values, then runs attention for the last t queries (built for batches of `max_batch`,
/// which bounds how many key splits a step may use). Returns how the step ran.
#[allow(clippy::too_many_arguments)]
fn check_kv_and_attention(gpu: &Gpu, rng: &mut SplitMix64, shape: AttentionShape, h: usize, hkv: usize, d: usize, page: usize, start: usize, t: usize, max_batch: usize) -> AttentionPlan {
    check_windowed_attention(gpu, rng, shape, h, hkv, d, page, start, t, max_batch, None)
}

/// `check_kv_and_attention` for a layer whose queries see `window` positions (and a scale
/// other than 1/sqrt(D), as Gemma 3 27B's).
#[allow(clippy::too_many_arguments)]
fn check_windowed_attention(gpu: &Gpu, rng: &mut SplitMix64, shape: AttentionShape, h: usize, hkv: usize, d: usize, page: usize, start: usize, t: usize, max_batch: usize, window: Option<usize>) -> AttentionPlan {
    let mask = match window {
        None => AttentionMask::causal(d),
        Some(w) => AttentionMask { window: Some(w), scale: 0.75 / (d as f32).sqrt() },
    };
    let len = start + t;
    let (page_table, pool) = shuffled_pages(rng, len.div_ceil(page));
    let page_table = &page_table[..];
    let kvd = hkv * d;
    let (k16, v16, q) = (f16_round(&randn(rng, len * kvd)), f16_round(&randn(rng, len * kvd)), randn(rng, t * h * d));
    // Each position's f16 pairs at its page slot; the slots no position uses hold zeros.
    let paged = |values: &[f32]| {
        let mut words = vec![0u32; pool * page * kvd / 2];
        for p in 0..len {
            let base = (page_table[p / page] as usize * page + p % page) * kvd / 2;
            for (i, pair) in values[p * kvd..][..kvd].chunks_exact(2).enumerate() {
                words[base + i] = half::f16::from_f32(pair[0]).to_bits() as u32 | (half::f16::from_f32(pair[1]).to_bits() as u32) << 16;
            }
        }
        gpu.upload("cache", bytemuck::cast_slice(&words))
    };
    let (kc, vc) = (paged(&k16), paged(&v16));
    let ptb = gpu.upload("page_table", bytemuck::cast_slice(page_table));
    let op = AttentionPaged::new(gpu, shape, mask, h, hkv, d, page, max_batch);
    let step = gpu.uniform("step", &StepParams::new(t as u32, start as u32));
    let plan = op.plan(t as u32, start as u32);
    let split = gpu.uniform("split", &plan.split_params());
    let qb = gpu.upload("q", f32_bytes(&q));
    let scratch = gpu.storage("scratch", op.scratch_bytes());
    let out = gpu.storage("out", (t * h * d * 4) as u64);
    let b = op.bind(gpu, &step, &split, &qb, &ptb, &kc, &vc, &scratch, &out);
    run(gpu, |p| op.encode(p, &b, t as u32, start as u32, plan));
    // The reference is fed the same f16-rounded K/V, so only summation order differs.
    let want = reference::attention(&q, &k16, &v16, h, hkv, d, start, mask);
    let what = format!("{shape:?} attention H={h} Hkv={hkv} D={d} page={page} start={start} T={t} window={window:?} as {plan:?}");
    assert_close(&what, &read(gpu, &out, t * h * d), &want, 1e-4);
    plan
}

fn splits(plan: AttentionPlan) -> u32 {
    match plan {
        AttentionPlan::Splits(split) | AttentionPlan::Decode(split) => split.splits,
        AttentionPlan::Rows => 0,
    }
}

#[test]
fn decoded_tokens_attention() {
    // `decode`: one split (no combine) up to 128 keys, then splits of 32 to 128 keys up to 64 of
    // them; past that `partial`. Groups of 1 to 8 query heads, heads of 32 to 256.
    let mut rng = SplitMix64(22);
    let gpu = gpu(LimitsPolicy::Adapter);
    for (h, hkv, d, start, want_splits) in [(6, 2, 64, 127, 1), (8, 8, 32, 128, 5), (16, 2, 128, 700, 22), (4, 1, 256, 300, 10), (6, 2, 64, 5000, 64)] {
        let plan = check_kv_and_attention(gpu, &mut rng, AttentionShape::Tiled, h, hkv, d, 16, start, 1, 64);
        assert!(matches!(plan, AttentionPlan::Decode(s) if s.splits == want_splits), "{plan:?}, not {want_splits} splits");
    }
    let plan = check_kv_and_attention(gpu, &mut rng, AttentionShape::Tiled, 6, 2, 64, 16, 9000, 1, 64);
    assert!(matches!(plan, AttentionPlan::Splits(_)), "{plan:?}");
}

#[test]
fn paged_attention() {
    use AttentionShape::{Lanes, Tiled};
    let mut rng = SplitMix64(8);
    for policy in [LimitsPolicy::Adapter, LimitsPolicy::WebGpuDefault] {
        let gpu = gpu(policy);
        for (start, t) in [(0, 1), (0, 33), (15, 1), (17, 7), (16 * 3 - 1, 33), (16 * 4 + 1, 2)] {
            for shape in [Tiled, Lanes] {
                check_kv_and_attention(gpu, &mut rng, shape, 6, 2, 64, 16, start, t, 64);
            }
        }
    }
    let gpu = gpu(LimitsPolicy::Adapter);
    let mut check = |shape, h, hkv, d, page, start, t, max_batch| check_kv_and_attention(gpu, &mut rng, shape, h, hkv, d, page, start, t, max_batch);
    for shape in [Tiled, Lanes] {
        // Decode against a long context: many splits.
        assert!(splits(check(shape, 9, 3, 64, 16, 1500, 1, 64)) > 8);
        // The warm path: a few new tokens over a cached prefix (on CPU adapters as products).
        let warm = check(shape, 9, 3, 64, 16, 1000, 32, 512);
        assert_eq!(warm == AttentionPlan::Rows, shape == Lanes, "{warm:?}");
        // A large head dimension (8-key tiles), an odd page size with MHA, the largest group.
        check(shape, 4, 1, 256, 16, 40, 7, 64);
        check(shape, 4, 1, 256, 16, 300, 2, 64);
        check(shape, 3, 3, 32, 7, 20, 5, 64);
        check(shape, 8, 1, 128, 16, 9, 3, 64); // MAX_GROUP
        check(shape, 8, 1, 128, 16, 700, 1, 64);
    }
    // A batch whose first queries end before the last split begins (the combine skips it).
    assert_eq!(splits(check(Tiled, 6, 2, 64, 16, 100, 40, 512)), 3);
    assert!(splits(check(Tiled, 9, 3, 64, 16, 1000, 32, 512)) > 1);
    assert_eq!(splits(check(Lanes, 2, 1, 64, 16, 120, 1, 512)), 2);
    // CPU adapters: a head dimension that is not a multiple of 8 keeps `lanes` for every step,
    // and so does a step whose score matrix would outgrow the 32 MiB scratch.
    assert!(splits(check(Lanes, 3, 3, 36, 16, 50, 5, 64)) > 0);
    assert_eq!(check(Lanes, 8, 1, 64, 16, 1500, 2, 64), AttentionPlan::Rows);
    let op = AttentionPaged::new(gpu, Lanes, AttentionMask::causal(64), 8, 1, 64, 16, 512);
    assert_eq!(op.plan(512, 1500), AttentionPlan::Rows); // 4096 rows × 2013 keys: 31.5 MiB
    assert!(splits(op.plan(512, 1600)) > 0);
}

#[test]
fn paged_attention_in_a_sliding_window() {
    use AttentionShape::{Lanes, Tiled};
    let mut rng = SplitMix64(21);
    let gpu = gpu(LimitsPolicy::Adapter);
    let mut check = |shape, h, hkv, d, start, t, max_batch, window| check_windowed_attention(gpu, &mut rng, shape, h, hkv, d, 16, start, t, max_batch, Some(window));
    for shape in [Tiled, Lanes] {
        // Decode past the window, a step straddling it, a step inside it.
        check(shape, 6, 2, 64, 40, 1, 64, 16);
        check(shape, 6, 2, 64, 10, 20, 64, 16);
        check(shape, 6, 2, 64, 3, 5, 64, 16);
        // Gemma 3's heads (4 over 1 KV head of 256) and window, decode and a warm step far past it.
        let decode = check(shape, 4, 1, 256, 1500, 1, 64, 512);
        assert!(splits(decode) > 1, "{decode:?}");
        check(shape, 4, 1, 256, 1000, 40, 512, 512);
        // A window shorter than the step, every query's keys starting at its own.
        check(shape, 4, 1, 64, 100, 33, 64, 7);
        check(shape, 4, 1, 64, 0, 33, 64, 7);
    }
    // The split plan covers only the window: the keys before it are not split over.
    let op = AttentionPaged::new(gpu, Tiled, AttentionMask { window: Some(512), scale: 0.0625 }, 4, 1, 256, 16, 64);
    match op.plan(1, 4000) {
        AttentionPlan::Splits(s) | AttentionPlan::Decode(s) => assert!(s.first == 4000 + 1 - 512 && s.splits * s.keys_per_split >= 512 && (s.splits - 1) * s.keys_per_split < 512, "{s:?}"),
        AttentionPlan::Rows => panic!("decode planned as rows"),
    }
}

#[test]
fn kv_quant_against_the_cpu_reference() {
    use radixlm::kv::spill::{group_size, QuantLayout, SpillFormat};
    let mut rng = SplitMix64(12);
    // (page size, KV heads, head dim): the default model's pages, a tiny model's 32-wide heads,
    // 128-wide heads (two groups each) and an odd page size.
    for (page, hkv, d) in [(16, 3, 64), (16, 2, 32), (16, 2, 128), (7, 1, 64)] {
        let page_values = page * hkv * d;
        let n_pool = 9;
        // Scaled like real keys: a few large channels over many small ones.
        let slices: Vec<Vec<f32>> = (0..4).map(|_| (0..n_pool * page_values).map(|i| rng.normal() * if i % 17 == 0 { 8.0 } else { 0.5 }).collect()).collect();
        for format in [SpillFormat::Q8, SpillFormat::Q4] {
            let layout = QuantLayout { format, group: group_size(d).unwrap() };
            for policy in [LimitsPolicy::Adapter, LimitsPolicy::WebGpuDefault] {
                let c = common::check_kv_quant(gpu(policy), layout, page_values, &slices, &[7, 0, 3, 8, 1]);
                assert!(c.worst_error_over_bound <= 1.0, "{format:?} page={page} hkv={hkv} d={d}: {c:?}");
            }
        }
    }
}

#[test]
fn matmul_wide_output_decode() {
    // An LM-head-like 70001-column output over 4 parts.
    let gpu = gpu(LimitsPolicy::Adapter);
    let mut rng = SplitMix64(9);
    for shape in [MatmulShape::Rows, MatmulShape::WIDE] {
        check_matmul(gpu, &mut rng, shape, GgmlType::Q8_0, 1, 64, 70001, Some(20000 * 68), false);
    }
}

#[test]
fn weight_upload_rejects_bad_shapes() {
    let gpu = gpu(LimitsPolicy::Adapter);
    let e = GpuWeight::upload(gpu, "blk.0.attn_q.weight", GgmlType::Q4_0, 64, 2, &[0; 35]).err().unwrap().to_string();
    assert!(e.contains("blk.0.attn_q.weight") && e.contains("35 bytes"), "{e}");
    let e = GpuWeight::upload(gpu, "w", GgmlType::Q4_0, 40, 2, &[0; 36]).err().unwrap().to_string();
    assert!(e.contains("row length 40"), "{e}");
    let e = GpuWeight::upload_with_max_part_bytes(gpu, "w", GgmlType::F32, 64, 2, &[0; 512], 100).err().unwrap().to_string();
    assert!(e.contains("exceeds"), "{e}");
    let buf = gpu.storage("small", 16);
    let e = block_on(gpu, read_f32(gpu, &buf, 2, 3)).err().unwrap().to_string();
    assert!(e.contains("exceeds"), "{e}");
}
