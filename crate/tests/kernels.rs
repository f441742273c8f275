//! Every GPU kernel against the CPU reference (model/reference.rs, gguf/blocks.rs) on seeded
//! random inputs with odd sizes, on whatever adapter is present (llvmpipe in CI), under both
//! the adapter's limits and the WebGPU default limits.

use radixlm::gguf::blocks::{dequantize, quantize};
use radixlm::gguf::GgmlType;
use radixlm::gpu::executor::{block_on, open};
use radixlm::gpu::ops::*;
use radixlm::gpu::readback::read_f32;
use radixlm::gpu::{Gpu, GpuWeight, LimitsPolicy, StepParams};
use radixlm::model::reference;
use radixlm::model::synthetic::SplitMix64;
use std::sync::OnceLock;

const TYPES: [GgmlType; 5] = [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0];

fn gpu(policy: LimitsPolicy) -> &'static Gpu {
    static ADAPTER: OnceLock<Gpu> = OnceLock::new();
    static DEFAULT: OnceLock<Gpu> = OnceLock::new();
    let cell = match policy {
        LimitsPolicy::Adapter => &ADAPTER,
        LimitsPolicy::WebGpuDefault => &DEFAULT,
    };
    cell.get_or_init(|| open(policy).expect("a WebGPU/Vulkan adapter (llvmpipe) is required for the kernel tests"))
}

fn randn(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
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

fn check_matmul(gpu: &Gpu, rng: &mut SplitMix64, ty: GgmlType, t: usize, k: usize, n: usize, max_part_bytes: Option<u64>, accumulate: bool) {
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
    let op = Matmul::new(gpu, ty, k, n, accumulate);
    let b = op.bind(gpu, &step, &xb, &gw, &yb);
    run(gpu, |p| op.encode(p, &b, t as u32));
    let got = read(gpu, &yb, t * n);
    // f32 accumulation in a different order than the reference: ~1e-6 relative.
    assert_close(&format!("matmul {} T={t} K={k} N={n} acc={accumulate}", ty.name()), &got, &want, 1e-4);
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
            let odd_k = if ty.block_len() == 1 { 257 } else { 288 };
            for t in [1, 3, 7, 33, 70] {
                check_matmul(gpu, &mut rng, ty, t, odd_k, 257, None, false);
                check_matmul(gpu, &mut rng, ty, t, 96, 64, None, true);
            }
            // Forced multi-part weights: parts of 5 rows plus a short last one, both kernels.
            for t in [1, 33] {
                let row = ty.row_bytes(96).unwrap() as u64;
                check_matmul(gpu, &mut rng, ty, t, 96, 64, Some(5 * row + 3), true);
            }
        }
    }
}

#[test]
fn matmul_prefill_speed_smollm_ffn() {
    // 512×576 · (1536×576)ᵀ in Q4_1, SmolLM2-135M's FFN up projection; prints the time.
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
    read(gpu, &yb, 1); // warm-up: pipeline compilation
    let start = std::time::Instant::now();
    run(gpu, |p| op.encode(p, &b, t as u32));
    let got = read(gpu, &yb, t * n);
    eprintln!("matmul Q4_1 {t}x{k}x{n}: {:?} on {}", start.elapsed(), gpu.info.name);
    assert_close("matmul 512x576x1536", &got, &reference::matmul(&x, &w, k, n), 1e-4);
}
