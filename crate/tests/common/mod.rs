//! Helpers shared by the integration tests: the backends a test body runs on, the default model,
//! the llama.cpp goldens, random inputs of every weight type.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use radixlm::cpu::CpuOptions;
use radixlm::engine::{Engine, EngineOptions, Poller, Target};
use radixlm::gguf::GgmlType;
use radixlm::gpu::executor::open;
use radixlm::gpu::LimitsPolicy;
use radixlm::model::synthetic::SplitMix64;

/// Every weight type the kernels read.
pub const TYPES: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// A row length that reaches the tails: 257 for one-weight types, an odd number of blocks
/// otherwise (Q6_K's 210-byte blocks then start rows off word boundaries).
pub fn odd_k(ty: GgmlType) -> usize {
    match ty.block_len() {
        1 => 257,
        32 => 288,
        bl => 3 * bl,
    }
}

/// `n` samples of a unit normal.
pub fn randn(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
}

/// What a test body runs on: every engine test is written once and run on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// wgpu on the machine's adapter (Mesa's llvmpipe in CI), with its limits or WebGPU's
    /// defaults.
    Gpu(LimitsPolicy),
    /// The CPU backend on two threads (CI's cores).
    Cpu,
}

impl Backend {
    pub fn target(self) -> Target {
        match self {
            Backend::Gpu(policy) => Target::Gpu(Arc::new(open(policy).expect("a Vulkan device (Mesa llvmpipe on CI)"))),
            Backend::Cpu => Target::Cpu(CpuOptions { threads: Some(2), ..Default::default() }),
        }
    }

    /// The GPU limited to WebGPU's defaults, as a phone browser offers; the CPU as it is.
    pub fn with_webgpu_limits(self) -> Self {
        match self {
            Backend::Gpu(_) => Backend::Gpu(LimitsPolicy::WebGpuDefault),
            Backend::Cpu => Backend::Cpu,
        }
    }

    /// The engine over `bytes` on this backend.
    pub fn load(self, bytes: &[u8], opts: &EngineOptions) -> Engine {
        self.try_load(bytes, opts).expect("model loads")
    }

    pub fn try_load(self, bytes: &[u8], opts: &EngineOptions) -> Result<Engine, radixlm::engine::EngineError> {
        let target = self.target();
        Poller::for_target(&target).block_on(Engine::load(target, bytes, opts))
    }
}

/// `on_each_backend!(name, body)`: `name::gpu` and `name::cpu` tests running `body(backend)`.
#[macro_export]
macro_rules! on_each_backend {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn gpu() {
                ($body)($crate::common::Backend::Gpu(radixlm::gpu::LimitsPolicy::Adapter))
            }
            #[test]
            fn cpu() {
                ($body)($crate::common::Backend::Cpu)
            }
        }
    };
}

pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The default model's bytes. The test command fetches it first; a missing file fails the test.
pub fn default_model_bytes() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models").join(DEFAULT_MODEL);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}. Run scripts/fetch_model.sh (the test command does).", path.display())
    })
}

#[derive(serde::Deserialize)]
pub struct Goldens {
    pub cases: Vec<GoldenCase>,
}

#[derive(serde::Deserialize)]
pub struct GoldenCase {
    pub name: String,
    pub kind: String,
    pub text: String,
    #[serde(default)]
    pub messages: Vec<radixlm_message::Message>,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
}

pub mod radixlm_message {
    #[derive(serde::Deserialize, Clone)]
    pub struct Message {
        pub role: String,
        pub content: String,
    }
}

pub fn goldens() -> Goldens {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/goldens.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Relative L2 error of `got` against `want`.
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    let num: f32 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f32 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

/// How the GPU's spill quantization of some pages compared with the CPU reference.
#[derive(Debug)]
pub struct QuantCheck {
    /// Largest round-trip error over its bound (`QuantLayout::error_bound`); ≤ 1 passes.
    pub worst_error_over_bound: f32,
    /// Relative L2 error of the round trip over all values.
    pub rel_err: f32,
    /// Values whose GPU level differs from the CPU reference's (by one level at most).
    pub levels_off_by_one: usize,
    pub values: usize,
}

/// Quantizes the pages `batch` of each slice (one pool buffer each: `page_values` f16 values
/// per page) on the GPU, checks the words against the CPU reference, dequantizes them on the
/// GPU into other pages and checks those against the CPU decoding of the same words.
pub fn check_kv_quant(gpu: &radixlm::gpu::Gpu, layout: radixlm::kv::spill::QuantLayout, page_values: usize, slices: &[Vec<f32>], batch: &[u32]) -> QuantCheck {
    use radixlm::gpu::executor::block_on;
    use radixlm::gpu::ops::{KvQuant, SpillParams};
    use radixlm::gpu::readback::read_u32;
    let n_pool = slices[0].len() / page_values;
    let n_lk = slices.len();
    let op = KvQuant::new(gpu, layout, page_values, n_lk);
    let words_per_page = layout.bytes_for(page_values) / 4;
    let packed = gpu.storage("packed", (batch.len() * n_lk * words_per_page * 4) as u64);
    let mut list = vec![batch.len() as u32];
    list.extend_from_slice(batch);
    let batch_buf = gpu.upload("batch", bytemuck::cast_slice(&list));
    let f16_pairs = |v: &[f32]| -> Vec<u32> {
        v.chunks(2).map(|p| u32::from(half::f16::from_f32(p[0]).to_bits()) | (u32::from(half::f16::from_f32(p[1]).to_bits()) << 16)).collect()
    };
    let pools: Vec<wgpu::Buffer> = slices.iter().map(|s| gpu.upload("pool", bytemuck::cast_slice(&f16_pairs(s)))).collect();
    let params: Vec<wgpu::Buffer> = (0..n_lk).map(|lk| gpu.uniform("params", &SpillParams { lk: lk as u32, _pad: [0; 3] })).collect();
    let bindings: Vec<_> = (0..n_lk).map(|lk| op.bind(gpu, &params[lk], &batch_buf, &pools[lk], &packed)).collect();
    let submit = |dequant: bool| {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for b in &bindings {
                if dequant {
                    op.encode_dequantize(&mut pass, b, batch.len() as u32);
                } else {
                    op.encode_quantize(&mut pass, b, batch.len() as u32);
                }
            }
        }
        gpu.queue.submit([enc.finish()]);
    };
    submit(false);
    let gpu_words = block_on(gpu, read_u32(gpu, &packed, 0, (batch.len() * n_lk * words_per_page) as u64)).unwrap();
    let mut check = QuantCheck { worst_error_over_bound: 0.0, rel_err: 0.0, levels_off_by_one: 0, values: 0 };
    let (mut err2, mut ref2) = (0f64, 0f64);
    let bits = layout.format.bits();
    for (j, &page) in batch.iter().enumerate() {
        for (lk, slice) in slices.iter().enumerate() {
            let x = &slice[page as usize * page_values..][..page_values];
            let x: Vec<f32> = x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
            let got = &gpu_words[(j * n_lk + lk) * words_per_page..][..words_per_page];
            let want = layout.quantize(&x);
            let wpg = layout.words_per_group();
            for (g, (gw, ww)) in got.chunks(wpg).zip(want.chunks(wpg)).enumerate() {
                // WGSL converts f32 to f16 by rounding either way: a step or minimum may be one f16 ulp off.
                let halves = |u: u32| [u & 0xffff, u >> 16];
                let ulps = halves(gw[0]).into_iter().zip(halves(ww[0])).map(|(a, b)| a.abs_diff(b)).max();
                assert!(ulps <= Some(1), "page {page} slice {lk} group {g}: f16 step and minimum {:#x}, reference {:#x}", gw[0], ww[0]);
                for (w, (a, b)) in gw[1..].iter().zip(&ww[1..]).enumerate() {
                    for i in 0..32 / bits {
                        let (qa, qb) = ((a >> (i * bits)) & ((1 << bits) - 1), (b >> (i * bits)) & ((1 << bits) - 1));
                        assert!(qa.abs_diff(qb) <= 1, "page {page} slice {lk} group {g} word {w} value {i}: level {qa}, reference {qb}");
                        check.levels_off_by_one += usize::from(qa != qb);
                    }
                }
            }
            let y = layout.dequantize(got);
            for (gx, gy) in x.chunks(layout.group).zip(y.chunks(layout.group)) {
                let (lo, hi) = gx.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                let bound = layout.error_bound(lo, hi);
                for (a, b) in gx.iter().zip(gy) {
                    check.worst_error_over_bound = check.worst_error_over_bound.max((a - b).abs() / bound);
                    err2 += f64::from(a - b).powi(2);
                    ref2 += f64::from(*a).powi(2);
                }
            }
            check.values += x.len();
        }
    }
    check.rel_err = (err2 / ref2.max(1e-30)).sqrt() as f32;
    // Decode into the pool's pages again, over values overwritten with zeros first.
    let zeros = vec![0u32; n_pool * page_values / 2];
    for pool in &pools {
        gpu.queue.write_buffer(pool, 0, bytemuck::cast_slice(&zeros));
    }
    submit(true);
    for (lk, pool) in pools.iter().enumerate() {
        let words = block_on(gpu, read_u32(gpu, pool, 0, (n_pool * page_values / 2) as u64)).unwrap();
        for (j, &page) in batch.iter().enumerate() {
            let want = layout.dequantize(&gpu_words[(j * n_lk + lk) * words_per_page..][..words_per_page]);
            let got = &words[page as usize * page_values / 2..][..page_values / 2];
            for (i, w) in got.iter().enumerate() {
                let pair = [*w as u16, (*w >> 16) as u16].map(|x| half::f16::from_bits(x).to_f32());
                for (h, v) in pair.iter().enumerate() {
                    let e = want[2 * i + h];
                    let ulp = half::f16::from_f32(e.abs().max(6.2e-5)).to_f32() * 2f32.powi(-10);
                    assert!((v - e).abs() <= ulp, "dequantize page {page} slice {lk} value {}: got {v} want {e}", 2 * i + h);
                }
            }
        }
    }
    check
}

/// One request on a fresh sequence, greedy for `n` tokens (end of sequence never chosen),
/// released afterwards (its pages stay cached).
pub fn run_greedy(engine: &mut radixlm::engine::Engine, prompt: &[u32], n: usize) -> radixlm::engine::Generation {
    use radixlm::engine::sampling::SamplingParams;
    let poller = engine.poller();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(n) };
    let mut seq = radixlm::engine::Sequence::default();
    let g = poller.block_on(engine.generate(&mut seq, prompt, &params, |_| true)).unwrap();
    engine.release(&mut seq);
    assert_eq!(g.tokens.len(), n, "ignore_eos runs to max_tokens");
    assert!(g.tokens.iter().all(|t| !engine.tokenizer.stop_ids().contains(t)), "ignore_eos chose an end-of-sequence token: {:?}", g.tokens);
    g
}
