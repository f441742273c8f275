//! The whole default model on each backend: against the CPU reference (logits) and against
//! llama.cpp's greedy tokens (goldens; the GPU on WebGPU's default limits, as browsers give
//! them, the tighter case).

mod common;

use common::{rel_err, Backend};

use radixlm::engine::{EngineError, EngineOptions, Sequence};
use radixlm::gguf::GgufFile;
use radixlm::kv::CacheError;
use radixlm::model::reference::{ReferenceCache, ReferenceModel};
use radixlm::tokenizer::Message;

/// The near-tie margin: where our greedy path leaves llama.cpp's, our own top two logits at that
/// step must be within this of each other.
///
/// Why 0.25 and not tighter: llama.cpp's CPU matmuls round activations to 8 bits (q8_1) while
/// ours are f32, and this 135M model amplifies such differences. llama.cpp does not agree with
/// itself more closely: on these prompts, switching only its KV cache between f16 and f32 moves
/// its logits by up to 0.36 and flips its own greedy choice where its top two were 0.33 apart
/// (raw-0, step 5). Our f32 CPU reference, against the f32-cache goldens, first diverges at
/// gaps of at most 0.10.
const NEAR_TIE: f32 = 0.25;

/// How far each backend's logits may be from the f32 reference (relative L2). The GPU computes
/// in f32: 1e-3. The CPU backend quantizes each product's input to 8 bits per block of 32
/// (llama.cpp's q8_1, as its own CPU does): measured 1-2e-2 on these prompts, bound 1e-2.
fn logit_bound(backend: Backend) -> f32 {
    match backend {
        Backend::Gpu(_) => 1e-3,
        Backend::Cpu => 1e-2,
    }
}

fn top2(l: &[f32]) -> ((u32, f32), (u32, f32)) {
    let mut best = (0u32, f32::NEG_INFINITY);
    let mut second = (0u32, f32::NEG_INFINITY);
    for (i, &v) in l.iter().enumerate() {
        if v > best.1 {
            second = best;
            best = (i as u32, v);
        } else if v > second.1 {
            second = (i as u32, v);
        }
    }
    (best, second)
}

on_each_backend!(logits_match_the_cpu_reference, |backend: Backend| {
    let bytes = common::default_model_bytes();
    let reference = ReferenceModel::load(&GgufFile::parse(&bytes).unwrap()).unwrap();
    let mut engine = backend.load(&bytes, &EngineOptions { max_batch: 32, ..Default::default() });
    let poller = engine.poller();
    let prompts = [
        "The capital of France is",
        "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n",
        // 70+ tokens: more than one prefill batch of 32 and several KV pages.
        "In a quiet valley between two mountains there was a village whose people kept bees, grew \
         apples and pears, and every autumn held a market where travellers came from far away to \
         buy honey, cider and the bright wool of their sheep. One year, a stranger arrived",
    ];
    for p in prompts {
        let tokens = engine.tokenizer.encode(p, true).unwrap();
        let want = reference.forward(&tokens, &mut ReferenceCache::default());
        let want = &want[want.len() - reference.cfg.vocab_size..];
        let mut seq = Sequence::default();
        let got = poller.block_on(engine.logits(&mut seq, &tokens)).unwrap();
        engine.release(&mut seq);
        let e = rel_err(&got, want);
        println!("{backend:?}, {} tokens: relative error {e:.2e}", tokens.len());
        assert!(e < logit_bound(backend), "{p:?}: {backend:?} logits differ from the reference by {e:.2e} (relative L2)");
        let ((best, _), (_, second)) = top2(want);
        let ((got_best, _), _) = top2(&got);
        assert!(got_best == best || want[best as usize] - second < NEAR_TIE, "{p:?}: argmax differs away from a near tie");
    }
});

/// Every golden prompt's ids, then its first `steps` greedy tokens.
fn check_goldens(backend: Backend, steps: usize) {
    let mut engine = backend.load(&common::default_model_bytes(), &EngineOptions::default());
    let poller = engine.poller();
    let goldens = common::goldens();
    assert!(goldens.cases.len() >= 10);
    assert!(goldens.cases.iter().any(|c| c.prompt_ids.len() > 500), "one golden prompt must exceed 500 tokens");
    let mut exceptions = Vec::new();
    for case in &goldens.cases {
        if case.kind == "chat" {
            let messages: Vec<Message> = case.messages.iter().map(|m| Message::new(m.role.clone(), m.content.clone())).collect();
            let rendered = engine.chat_template.as_ref().unwrap().render(&messages.into(), true).unwrap();
            assert_eq!(rendered, case.text, "{}: chat template renders differently", case.name);
        }
        let ids = engine.tokenizer.encode(&case.text, true).unwrap();
        assert_eq!(ids, case.prompt_ids, "{}: token ids differ from llama.cpp's", case.name);

        let mut seq = Sequence::default();
        let mut tokens = ids.clone();
        for (step, &want) in case.greedy_ids.iter().take(steps).enumerate() {
            let logits = poller.block_on(engine.logits(&mut seq, &tokens)).unwrap();
            let ((best, l1), (_, l2)) = top2(&logits);
            if best != want {
                assert!(
                    l1 - l2 < NEAR_TIE,
                    "{}: greedy token {step} is {best}, llama.cpp's is {want}, and our top two logits are {:.3} apart (not a near tie)",
                    case.name,
                    l1 - l2
                );
                exceptions.push(format!(
                    "{}: step {step}: ours {best} vs llama.cpp {want}, our top-2 gap {:.4} < {NEAR_TIE}",
                    case.name,
                    l1 - l2
                ));
                break;
            }
            tokens.push(best);
        }
        engine.release(&mut seq);
    }
    for e in &exceptions {
        println!("near-tie exception: {e}");
    }
}

// All 32 of every case on the CPU; on the GPU (a software adapter in CI, half a second a step)
// every prompt and its first 6 tokens, the long prompt's attention included.
on_each_backend!(goldens_match_llama_cpp, |backend: Backend| {
    let steps = if matches!(backend, Backend::Gpu(_)) { 6 } else { 32 };
    check_goldens(backend.with_webgpu_limits(), steps)
});

on_each_backend!(a_prompt_over_the_context_or_the_kv_budget_is_a_clear_error, |backend: Backend| {
    let bytes = common::default_model_bytes();
    let opts = EngineOptions { max_context: Some(64), ..Default::default() };
    let mut engine = backend.load(&bytes, &opts);
    let poller = engine.poller();
    let long: Vec<u32> = (0..65).map(|i| 100 + i).collect();
    let err = poller.block_on(engine.logits(&mut Sequence::default(), &long)).unwrap_err();
    assert!(matches!(err, EngineError::PromptTooLong { prompt_tokens: 65, limit: 64 }), "{err}");
    assert!(err.to_string().contains("65 tokens"), "{err}");

    // A pool of 4 pages (64 tokens) with a context allowing more: the budget is the limit.
    let page = radixlm::kv::page_bytes(&engine.cfg, 16);
    let opts = EngineOptions { kv_budget_bytes: 4 * page, max_context: Some(8192), ..Default::default() };
    let mut engine = backend.load(&bytes, &opts);
    // A new engine has a device of its own to poll.
    let poller = engine.poller();
    assert_eq!(engine.kv_capacity_tokens(), 64);
    // One sequence holds three of the four pages; another needing two (sharing nothing with
    // it) is refused, and the held pages are untouched.
    let mut held = Sequence::default();
    poller.block_on(engine.logits(&mut held, &long[..48])).unwrap();
    let other: Vec<u32> = (0..32).map(|i| 5000 + i).collect();
    let err = poller.block_on(engine.logits(&mut Sequence::default(), &other)).unwrap_err();
    assert!(matches!(err, EngineError::Cache(CacheError::Full { needed_tokens: 32, .. })), "{err}");
    assert!(err.to_string().contains("KV cache budget"), "{err}");
    engine.release(&mut held);
    // The engine still works after the refusal.
    let ok = poller.block_on(engine.logits(&mut Sequence::default(), &long[..20])).unwrap();
    assert_eq!(ok.len(), engine.cfg.vocab_size);
});
