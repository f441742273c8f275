//! The engine on small synthetic models, on each backend: fast checks of batching, delta
//! prefill at an offset and weight types the default model does not use, against the CPU
//! reference.

mod common;

use std::sync::Arc;

use common::{rel_err, Backend};

use radixlm::engine::sampling::SamplingParams;
use radixlm::engine::{Engine, EngineOptions, Sequence, Target};
use radixlm::gguf::{GgmlType, GgufFile};
use radixlm::gpu::context::LimitsPolicy;
use radixlm::gpu::executor::{block_on, open};
use radixlm::gpu::ops::{KernelShapes, MatmulShape};
use radixlm::model::reference::{ReferenceCache, ReferenceModel};
use radixlm::model::synthetic::{SyntheticArch, SyntheticSpec};

fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

/// Drives the forward pass with raw ids spread over the vocabulary.
/// On the GPU with WebGPU's default limits; the GPU's kernel shapes in `opts` are ignored on
/// the CPU.
fn check(backend: Backend, spec: SyntheticSpec, opts: EngineOptions, n: usize) {
    let bytes = spec.to_gguf();
    let reference = ReferenceModel::load(&GgufFile::parse(&bytes).unwrap()).unwrap();
    let mut engine = backend.with_webgpu_limits().load(&bytes, &opts);
    let poller = engine.poller();
    let ids = tokens(n, spec.vocab_size);
    let want = reference.forward(&ids, &mut ReferenceCache::default());
    let want = &want[want.len() - spec.vocab_size..];

    // All at once (in batches of max_batch).
    let mut seq = Sequence::default();
    let got = poller.block_on(engine.logits(&mut seq, &ids)).unwrap();
    let e = rel_err(&got, want);
    assert!(e < 1e-3, "{spec:?}: whole prompt: relative error {e:.2e}");

    // The same sequence extended token by token from a prefix: delta prefill at an offset.
    let mut seq2 = Sequence::default();
    let split = n / 2 + 1;
    poller.block_on(engine.logits(&mut seq2, &ids[..split])).unwrap();
    let mut got = Vec::new();
    for end in split + 1..=n {
        got = poller.block_on(engine.logits(&mut seq2, &ids[..end])).unwrap();
    }
    let e = rel_err(&got, want);
    assert!(e < 1e-3, "{spec:?}: prefix then one token at a time: relative error {e:.2e}");
    engine.release(&mut seq);
    engine.release(&mut seq2);
}

#[test]
fn gpu_shaped_kernels_match_the_reference() {
    // The real-GPU shapes (the wide decode product, tiled split attention) on whatever adapter
    // runs the tests; 200 positions so that token-by-token attention splits its keys.
    let opts = EngineOptions { max_batch: 8, kernels: Some(KernelShapes::GPU), ..Default::default() };
    check(Backend::Gpu(LimitsPolicy::WebGpuDefault), SyntheticSpec::tiny(), opts, 200);
}

#[test]
fn gpu_shaped_kernels_with_the_adapters_features_match_the_reference() {
    // As above with what the adapter offers: f16 prefill tiles (shader-f16) and decode sums by
    // subgroup operations, both of which llvmpipe has.
    let gpu = open(LimitsPolicy::Adapter).unwrap();
    let shapes = KernelShapes::for_gpu(&gpu);
    assert!(shapes.matmul == MatmulShape::Wide { f16_tiles: true, subgroups: true } || !gpu.info.name.contains("llvmpipe"), "{shapes:?}");
    let opts = EngineOptions { max_batch: 64, kernels: Some(shapes), ..Default::default() };
    check(Backend::Gpu(LimitsPolicy::WebGpuDefault), SyntheticSpec::tiny(), opts, 200);
}

on_each_backend!(tiny_q4_1_model_in_small_batches_and_token_by_token, |backend: Backend| {
    let opts = EngineOptions { max_batch: 8, ..Default::default() };
    check(backend, SyntheticSpec::tiny(), opts, 37);
});

on_each_backend!(every_weight_type_matches_the_reference, |backend: Backend| {
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0] {
        let spec = SyntheticSpec { weight_type: ty, tied_embeddings: ty != GgmlType::F16, ..SyntheticSpec::tiny() };
        check(backend, spec, EngineOptions::default(), 21);
    }
    // V, and up, of another type than the rest: q/k/v apart, gate and up apart then SiLU·mul.
    let spec = SyntheticSpec { ffn_up_type: Some(GgmlType::Q8_0), attn_v_type: Some(GgmlType::Q8_0), ..SyntheticSpec::tiny() };
    check(backend, spec, EngineOptions::default(), 21);
});

on_each_backend!(k_quant_models_match_the_reference, |backend: Backend| {
    // Rows of whole 256-weight super-blocks. Each K-quant alone, then Q4_K_M's mix (Q6_K V,
    // embedding and tied LM head) with up in Q5_K, so q/k/v and gate/up are products apart.
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        check(backend, SyntheticSpec { weight_type: ty, embedding_type: ty, ..SyntheticSpec::tiny_256() }, EngineOptions::default(), 21);
    }
    let mix = SyntheticSpec { ffn_up_type: Some(GgmlType::Q5_K), ..SyntheticSpec::tiny_256().q4_k_m() };
    check(backend, mix, EngineOptions { max_batch: 8, ..Default::default() }, 21);
});

on_each_backend!(qwen2_models_match_the_reference, |backend: Backend| {
    // Biases on q, k and v and NEOX RoPE: one q/k/v product, then three (V in Q8_0), on both
    // decode shapes; untied, then tied.
    let qwen2 = SyntheticSpec { arch: SyntheticArch::Qwen2, weight_type: GgmlType::Q5_0, tied_embeddings: false, rope_base: 1_000_000.0, ..SyntheticSpec::tiny() };
    check(backend, qwen2.clone(), EngineOptions { max_batch: 8, ..Default::default() }, 40);
    check(backend, SyntheticSpec { attn_v_type: Some(GgmlType::Q8_0), tied_embeddings: true, ..qwen2.clone() }, EngineOptions { max_batch: 8, kernels: Some(KernelShapes::GPU), ..Default::default() }, 40);
});

on_each_backend!(heads_wider_than_the_embedding_match_the_reference, |backend: Backend| {
    // A head width stated in the file (attention.key_length, as Gemma 3's and Qwen3's): queries
    // 6 × 64 = 384 wide over a 192-wide model, on both decode shapes; then K-quant rows (4 heads
    // of 128 over 256) with NEOX RoPE and biases as Qwen's.
    let wide = SyntheticSpec { head_dim: Some(64), ..SyntheticSpec::tiny() };
    assert_eq!(wide.q_dim(), 2 * wide.n_embd);
    check(backend, wide.clone(), EngineOptions { max_batch: 8, ..Default::default() }, 40);
    check(backend, wide, EngineOptions { max_batch: 8, kernels: Some(KernelShapes::GPU), ..Default::default() }, 40);
    let k_quant = SyntheticSpec { head_dim: Some(128), arch: SyntheticArch::Qwen2, weight_type: GgmlType::Q4_K, embedding_type: GgmlType::Q4_K, ..SyntheticSpec::tiny_256() };
    check(backend, k_quant, EngineOptions::default(), 21);
});

on_each_backend!(qwen3_models_match_the_reference, |backend: Backend| {
    // Per-head q and k norms before NEOX RoPE, heads wider than the embedding (6 × 64 over 192),
    // no biases: one q/k/v product on both decode shapes, then three (V in Q8_0); untied, tied.
    let qwen3 = SyntheticSpec { arch: SyntheticArch::Qwen3, head_dim: Some(64), weight_type: GgmlType::Q8_0, tied_embeddings: false, rope_base: 1_000_000.0, ..SyntheticSpec::tiny() };
    check(backend, qwen3.clone(), EngineOptions { max_batch: 8, ..Default::default() }, 40);
    check(backend, qwen3.clone(), EngineOptions { max_batch: 8, kernels: Some(KernelShapes::GPU), ..Default::default() }, 40);
    check(backend, SyntheticSpec { attn_v_type: Some(GgmlType::Q4_0), tied_embeddings: true, ..qwen3 }, EngineOptions::default(), 21);
});

/// A small gemma3: six layers (five with windows of `window` positions, then a global one),
/// heads wider than n_embd / n_heads, Q8_0.
fn gemma3(window: usize) -> SyntheticSpec {
    SyntheticSpec { arch: SyntheticArch::Gemma3 { window }, n_layers: 6, head_dim: Some(64), weight_type: GgmlType::Q8_0, rope_base: 1_000_000.0, ..SyntheticSpec::tiny() }
}

on_each_backend!(gemma3_models_match_the_reference, |backend: Backend| {
    // 60 positions over windows of 16: the whole prompt (the rows kernels on a CPU adapter)
    // and token by token (split attention starting at the window), in both decode shapes.
    check(backend, gemma3(16), EngineOptions { max_batch: 8, ..Default::default() }, 60);
    check(backend, gemma3(16), EngineOptions { max_batch: 8, kernels: Some(KernelShapes::GPU), ..Default::default() }, 60);
    // GELU-gated FFN apart (the up projection's own type), a soft cap on the logits, untied.
    let capped = SyntheticSpec {
        ffn_up_type: Some(GgmlType::Q4_0),
        tied_embeddings: false,
        extra_metadata: vec![("gemma3.final_logit_softcapping".into(), radixlm::gguf::MetaValue::F32(4.0))],
        ..gemma3(24)
    };
    check(backend, capped, EngineOptions::default(), 40);
    // The windows are applied: the engine is far nearer the reference with them than with
    // windows wider than the prompt.
    let ids = tokens(60, 512);
    let reference = |spec: &SyntheticSpec| {
        let r = ReferenceModel::load(&GgufFile::parse(&spec.to_gguf()).unwrap()).unwrap();
        let all = r.forward(&ids, &mut ReferenceCache::default());
        all[all.len() - spec.vocab_size..].to_vec()
    };
    let mut engine = backend.with_webgpu_limits().load(&gemma3(16).to_gguf(), &EngineOptions::default());
    let got = engine.poller().block_on(engine.logits(&mut Sequence::default(), &ids)).unwrap();
    let with = rel_err(&got, &reference(&gemma3(16)));
    let without = rel_err(&got, &reference(&gemma3(1000)));
    assert!(without > 20.0 * with, "error {with:.2e} against the reference with windows, {without:.2e} without");
});

on_each_backend!(llama3_rope_factors_match_the_reference, |backend: Backend| {
    // Llama 3.2's RoPE (base 500000, rope_freqs.weight) over 200 positions, both decode shapes.
    let spec = SyntheticSpec { rope_base: 500_000.0, llama3_rope: true, ..SyntheticSpec::tiny() };
    check(backend, spec.clone(), EngineOptions { max_batch: 8, ..Default::default() }, 200);
    check(backend, spec.clone(), EngineOptions { max_batch: 8, kernels: Some(KernelShapes::GPU), ..Default::default() }, 40);
    // The factors are applied: the engine's logits are far nearer the reference's with them
    // than without (they slow only the slow pairs, so the two models differ by ~1e-3). In f32
    // products: f16 prefill tiles alone err by ~3e-4.
    let ids = tokens(200, spec.vocab_size);
    let reference = |spec: &SyntheticSpec| {
        let r = ReferenceModel::load(&GgufFile::parse(&spec.to_gguf()).unwrap()).unwrap();
        let all = r.forward(&ids, &mut ReferenceCache::default());
        all[all.len() - spec.vocab_size..].to_vec()
    };
    let mut engine = backend.with_webgpu_limits().load(&spec.to_gguf(), &EngineOptions { kernels: Some(KernelShapes::GPU), ..Default::default() });
    let got = engine.poller().block_on(engine.logits(&mut Sequence::default(), &ids)).unwrap();
    let with = rel_err(&got, &reference(&spec));
    let without = rel_err(&got, &reference(&SyntheticSpec { llama3_rope: false, ..spec.clone() }));
    assert!(without > 20.0 * with, "error {with:.2e} against the reference with the factors, {without:.2e} without");
});

#[test]
fn top_k_sampling_on_the_gpu_draws_what_the_cpu_draws() {
    // Same kernels, so the same logits: the GPU's 64 largest hold the CPU's top-k exactly.
    let bytes = SyntheticSpec { tied_embeddings: false, ..SyntheticSpec::tiny() }.to_gguf();
    let gpu = Arc::new(open(LimitsPolicy::Adapter).unwrap());
    let shapes = KernelShapes::for_adapter(&gpu);
    let params = SamplingParams { temperature: 0.9, top_k: 40, top_p: 0.95, seed: 3, max_tokens: 24, ignore_eos: true, ..Default::default() };
    let prompt = tokens(20, 256);
    let run = |gpu_top_k| {
        let opts = EngineOptions { kernels: Some(KernelShapes { gpu_top_k, ..shapes }), spill: None, ..Default::default() };
        let mut engine = block_on(&gpu, Engine::load(Target::Gpu(gpu.clone()), &bytes, &opts)).unwrap();
        let mut seq = Sequence::default();
        let before = gpu.bytes_read_back();
        let g = block_on(&gpu, engine.generate(&mut seq, &prompt, &params, |_| true)).unwrap();
        let per_token = (gpu.bytes_read_back() - before) / g.tokens.len() as u64;
        (g.tokens, g.top2_gaps, per_token)
    };
    let (gpu_tokens, gpu_gaps, gpu_bytes) = run(true);
    let (cpu_tokens, cpu_gaps, cpu_bytes) = run(false);
    // 64 (id, logit) pairs a token on the GPU path; the tiny model's 512 logits on the CPU path.
    assert_eq!((gpu_bytes, cpu_bytes), (512, 2048));
    assert_eq!(gpu_tokens.len(), 24);
    assert_eq!(gpu_tokens, cpu_tokens);
    assert_eq!(gpu_gaps, cpu_gaps);
}

on_each_backend!(a_qwen2_5_0_5b_shaped_model_loads_and_matches_the_reference, |backend: Backend| {
    // Real sizes: 24 layers, a 152k vocabulary, 0.37 GB in Q5_0 with a Q8_0 embedding (its
    // 138 MiB is beyond WebGPU's 128 MiB binding floor, so it is split), written here.
    let spec = SyntheticSpec::qwen2_5_0_5b_shape();
    let bytes = spec.to_gguf();
    let ids = tokens(6, spec.vocab_size);
    let want = {
        let reference = ReferenceModel::load(&GgufFile::parse(&bytes).unwrap()).unwrap();
        let all = reference.forward(&ids, &mut ReferenceCache::default());
        all[all.len() - spec.vocab_size..].to_vec()
    };
    let mut engine = backend.with_webgpu_limits().load(&bytes, &EngineOptions::default());
    let got = engine.poller().block_on(engine.logits(&mut Sequence::default(), &ids)).unwrap();
    let e = rel_err(&got, &want);
    assert!(e < 1e-3, "Qwen2.5-0.5B shape: relative error {e:.2e}");
});
