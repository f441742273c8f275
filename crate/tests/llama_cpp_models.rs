//! The architectures and format mixes people download, as llama.cpp's own quantizer writes
//! them, against llama.cpp: a small synthetic llama with Llama 3.x's RoPE factors, a qwen2
//! (biases on q/k/v, NEOX RoPE) and a qwen3 (per-head q/k norms, NEOX RoPE, heads wider than
//! the embedding), each quantized to Q4_K_M, Q5_K_M, Q6_K, Q5_0, Q5_1 and BF16 (qwen3 to Q8_0
//! and Q4_0 too), and a gemma3 (sliding windows of 16 positions in five of its six layers, post
//! norms, GELU) in Q4_K_M, Q8_0 and Q4_0 (crate/tests/fixtures/models, by
//! scripts/make_model_goldens.py). On each: the prompt's ids, the logits after it within a bound
//! per mix, 32 greedy tokens (16 in the real-GPU shapes) equal up to a near tie, and the prefix
//! cache's warm run equal to the cold one; in the adapter's kernel shapes and in the real-GPU
//! shapes.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{rel_err, run_greedy, Backend};

use radixlm::engine::{Engine, EngineOptions, Poller, Sequence, Target};
use radixlm::gpu::context::LimitsPolicy;
use radixlm::gpu::executor::open;
use radixlm::gpu::ops::KernelShapes;
use radixlm::gpu::Gpu;

#[derive(serde::Deserialize)]
struct Goldens {
    prompt: String,
    n_continue: usize,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    file: String,
    arch: String,
    ftype: String,
    prompt_ids: Vec<u32>,
    last_logits: Vec<f32>,
    last_logits_f32: Vec<f32>,
    greedy_ids: Vec<u32>,
}

/// Relative L2 error allowed between our logits and llama.cpp's on the same file, per mix.
/// llama.cpp's CPU products round the activations (to 8 bits with one scale per 256 for the
/// K-quants, q8_K; per 32 for Q5_0/Q5_1, q8_0/q8_1; to bf16 for BF16) and ours keep f32, so the
/// bound is that rounding's effect as measured on these files (K-quant mixes 1.45-1.60e-2,
/// Q5_0/Q5_1 0.99-1.21e-2, BF16 2.5-2.7e-3; the test prints them) with a margin of about 1.6×.
fn logit_bound(ftype: &str) -> f32 {
    match ftype {
        "BF16" => 5e-3,
        "Q5_0" | "Q5_1" => 2e-2,
        _ => 2.5e-2,
    }
}

/// Relative L2 error allowed against llama.cpp on its own dequantization of the file to F32,
/// which it multiplies in f32: what is left is our f16 KV pages and the order of summation.
/// f16 prefill tiles (the GPU shapes where the adapter has shader-f16) round each weight and
/// activation once more and stay within it (seen: 1.4-1.9e-4, against 0.8-1.0e-4 without).
const F32_BOUND: f32 = 1e-3;

/// Where our greedy path leaves llama.cpp's, our top two logits there must be this close (the
/// default model's goldens use the same margin: model_goldens.rs).
const NEAR_TIE: f32 = 0.25;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models")
}

#[test]
fn quantized_mixes_match_llama_cpp() {
    check_mixes(|| Target::Gpu(gpu()), None);
}

#[test]
fn quantized_mixes_match_llama_cpp_on_the_cpu() {
    check_mixes(|| Backend::Cpu.target(), None);
}

#[test]
fn quantized_mixes_match_llama_cpp_in_the_gpu_shapes() {
    // The real-GPU kernels on whatever adapter runs the tests, with the variants its features
    // allow (llvmpipe: f16 prefill tiles, subgroup decode sums).
    let gpu = gpu();
    let shapes = KernelShapes::for_gpu(&gpu);
    check_mixes(|| Target::Gpu(gpu.clone()), Some(shapes));
}

/// A device with WebGPU's default limits, as phones offer.
fn gpu() -> Arc<Gpu> {
    Arc::new(open(LimitsPolicy::WebGpuDefault).unwrap())
}

fn check_mixes(target: impl Fn() -> Target, kernels: Option<KernelShapes>) {
    let goldens: Goldens = serde_json::from_str(&std::fs::read_to_string(fixtures().join("goldens.json")).unwrap()).unwrap();
    assert_eq!(goldens.cases.len(), 23, "a case per architecture and mix");
    for case in &goldens.cases {
        let bytes = std::fs::read(fixtures().join(&case.file)).unwrap();
        let target = target();
        let poller = Poller::for_target(&target);
        let mut engine = poller.block_on(Engine::load(target, &bytes, &EngineOptions { kernels, ..Default::default() })).unwrap();
        match case.arch.as_str() {
            "llama3" => assert!(engine.cfg.arch == "llama" && engine.cfg.rope_factors, "{}: Llama 3.x's rope_freqs.weight", case.file),
            "qwen2" => assert!(engine.cfg.arch == "qwen2" && engine.cfg.qkv_bias && engine.cfg.rope_neox, "{}: qwen2", case.file),
            "qwen3" => assert!(engine.cfg.arch == "qwen3" && engine.cfg.qk_norm && engine.cfg.rope_neox && engine.cfg.q_dim() == 2 * engine.cfg.n_embd, "{}: qwen3", case.file),
            _ => assert!(engine.cfg.arch == "gemma3" && engine.cfg.post_norms && engine.cfg.window(0) == Some(16) && engine.cfg.window(5).is_none(), "{}: gemma3", case.file),
        }

        let ids = engine.tokenizer.encode(&goldens.prompt, true).unwrap();
        assert_eq!(ids, case.prompt_ids, "{}: token ids differ from llama.cpp's", case.file);

        // In the real-GPU shapes, whose steps are the slowest on a software adapter, the first 16
        // of llama.cpp's 32 greedy tokens; the adapter's shapes and the CPU take all 32.
        let cold_tokens = if kernels.is_some() { 16 } else { goldens.n_continue };
        let cold = run_greedy(&mut engine, &ids, cold_tokens);
        assert_eq!(cold.stats.reused_tokens, 0);
        match cold.tokens.iter().zip(&case.greedy_ids).position(|(a, b)| a != b) {
            None => assert_eq!(cold.tokens, case.greedy_ids[..cold_tokens], "{}", case.file),
            Some(step) => {
                let gap = cold.top2_gaps[step];
                assert!(gap < NEAR_TIE, "{}: greedy token {step} is {}, llama.cpp's is {}, and our top two logits are {gap:.3} apart (not a near tie)", case.file, cold.tokens[step], case.greedy_ids[step]);
                println!("{}: near tie at step {step} (our top-2 gap {gap:.4})", case.file);
            }
        }

        // Warm: the prompt's whole pages come from the cache and the tokens are the same. In the
        // real-GPU shapes the first 8 tokens: the cached pages are read from the first on.
        let warm_tokens = if kernels.is_some() { 8 } else { cold_tokens };
        let warm = run_greedy(&mut engine, &ids, warm_tokens);
        assert!(warm.stats.reused_tokens >= ids.len() / 16 * 16 - 16 && warm.stats.reused_tokens > 0, "{}: warm run reused {} tokens", case.file, warm.stats.reused_tokens);
        assert_eq!(warm.tokens, cold.tokens[..warm_tokens], "{}: warm run differs from cold", case.file);

        // The prompt's logits (its last token always computed, cached pages or not).
        let mut seq = Sequence::default();
        let logits = poller.block_on(engine.logits(&mut seq, &ids)).unwrap();
        engine.release(&mut seq);
        let exact = rel_err(&logits, &case.last_logits_f32);
        let e = rel_err(&logits, &case.last_logits);
        println!("{} ({}, {kernels:?}): logits' relative error against llama.cpp {e:.2e}, against llama.cpp on its F32 dequantization {exact:.2e}", case.file, case.ftype);
        assert!(exact < F32_BOUND, "{}: logits differ from llama.cpp's on its dequantization of the file by {exact:.2e} (relative L2)", case.file);
        assert!(e < logit_bound(&case.ftype), "{}: logits differ from llama.cpp's by {e:.2e} (relative L2)", case.file);

    }
}
