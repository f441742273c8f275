//! The rest of OpenAI's request on the default model: `n` choices computing the prompt once,
//! log-probabilities, penalties and logit biases, each checked against an independent
//! computation (a forward pass over the whole text so far, with the arithmetic written here);
//! and the request's fields refused by name when wrong or unknown.

mod common;

use common::{default_model_bytes, Backend};
use radixlm::api::{Dialect, RequestFields};
use radixlm::engine::sampling::{Penalties, SamplingParams};
use radixlm::engine::{ChoiceStep, Choices, Engine, EngineOptions, Generation, Sequence};
use radixlm::tokenizer::Message;

fn prompt(engine: &Engine, text: &str) -> Vec<u32> {
    engine.chat_tokens(&vec![Message::new("user", text)].into()).unwrap()
}

fn generate(engine: &mut Engine, prompt: &[u32], params: &SamplingParams) -> Generation {
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let g = poller.block_on(engine.generate(&mut seq, prompt, params, |_| true));
    engine.release(&mut seq);
    g.unwrap()
}

fn choices(engine: &mut Engine, prompt: &[u32], params: &SamplingParams, n: usize) -> Vec<Generation> {
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let mut c = Choices::new(engine.start(&mut seq, prompt, params).unwrap(), n);
    let generations = loop {
        if let ChoiceStep::Done { generations, .. } = poller.block_on(engine.step_choices(&mut c)).unwrap() {
            break generations;
        }
    };
    for mut seq in c.into_sequences() {
        engine.release(&mut seq);
    }
    generations
}

/// The logits after `tokens`, from a forward pass over all of them on a fresh sequence.
fn logits_after(engine: &mut Engine, tokens: &[u32]) -> Vec<f32> {
    engine.clear_cache();
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let logits = poller.block_on(engine.logits(&mut seq, tokens)).unwrap();
    engine.release(&mut seq);
    logits
}

fn argmax(l: &[f32]) -> u32 {
    (0..l.len()).fold(0, |best, i| if l[i] > l[best] { i } else { best }) as u32
}

fn no_pages_held(engine: &Engine) {
    let s = engine.cache_stats();
    assert_eq!(s.locked_pages, 0, "{s:?}");
    assert_eq!(s.free_pages + s.cached_pages, s.total_pages, "{s:?}");
}

/// Three choices: the prompt is prefilled once (the first choice's stats), greedy choices are
/// equal, and each sampled choice is what a request of its own with the seed plus its index
/// gives (the forked pages hold the same keys and values).
fn n_choices(backend: Backend, max_tokens: usize) {
    let mut engine = backend.load(&default_model_bytes(), &EngineOptions::default());
    let page = engine.cache_stats().page_size;
    let ids = prompt(&engine, "Name three things you might find at a seaside market, and why.");
    assert_ne!(ids.len() % page, 0, "the prompt must end inside a page, so forks copy a partial page");

    let greedy = choices(&mut engine, &ids, &SamplingParams::greedy(max_tokens), 3);
    assert_eq!(greedy.len(), 3);
    assert_eq!(greedy[0].stats.prefilled_tokens, ids.len());
    for g in &greedy[1..] {
        assert_eq!(g.tokens, greedy[0].tokens);
        assert_eq!(g.stats.prefilled_tokens, 0, "a fork computes no prompt token");
    }
    let merged = radixlm::engine::choices::merged_stats(&greedy).unwrap();
    assert_eq!((merged.prefilled_tokens, merged.generated_tokens), (ids.len(), 3 * greedy[0].tokens.len()));
    no_pages_held(&engine);

    engine.clear_cache();
    let sampled = SamplingParams { temperature: 0.9, top_k: 0, top_p: 1.0, seed: 11, max_tokens, ..Default::default() };
    let got = choices(&mut engine, &ids, &sampled, 3);
    assert_eq!(got[0].stats.prefilled_tokens, ids.len());
    for (i, g) in got.iter().enumerate() {
        engine.clear_cache();
        let alone = generate(&mut engine, &ids, &SamplingParams { seed: 11 + i as u64, ..sampled.clone() });
        assert_eq!(g.tokens, alone.tokens, "choice {i}: {:?} vs alone {:?}", g.text, alone.text);
    }
    assert!(got[1].tokens != got[0].tokens || got[2].tokens != got[0].tokens, "three seeds gave one reply: {:?}", got[0].text);
    no_pages_held(&engine);
}

#[test]
fn n_choices_compute_the_prompt_once_on_the_cpu() {
    n_choices(Backend::Cpu, 24);
}

#[test]
fn n_choices_compute_the_prompt_once_on_webgpu() {
    n_choices(Backend::Gpu(radixlm::gpu::LimitsPolicy::Adapter), 6);
}

#[test]
fn logprobs_are_the_log_softmax_of_the_logits() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let ids = prompt(&engine, "What is the capital of France?");
    let g = generate(&mut engine, &ids, &SamplingParams { logprobs: Some(5), ..SamplingParams::greedy(6) });
    assert_eq!(g.logprobs.len(), g.tokens.len());
    // The logits are computed as generation computes them (the prompt in one prefill, then a
    // token a step): prefill tiles and one-row steps round differently, by ~1e-4 over 30 layers.
    engine.clear_cache();
    let poller = engine.poller();
    let mut seq = Sequence::default();
    for (i, lp) in g.logprobs.iter().enumerate() {
        let l = poller.block_on(engine.logits(&mut seq, &[&ids[..], &g.tokens[..i]].concat())).unwrap();
        let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let log_z = max as f64 + l.iter().map(|&x| ((x - max) as f64).exp()).sum::<f64>().ln();
        let mut order: Vec<u32> = (0..l.len() as u32).collect();
        order.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
        assert_eq!(lp.token, g.tokens[i]);
        assert_eq!(lp.token, order[0], "greedy: the chosen token is the likeliest");
        assert!((lp.logprob as f64 - (l[lp.token as usize] as f64 - log_z)).abs() < 1e-4, "step {i}: {} vs {}", lp.logprob, l[lp.token as usize] as f64 - log_z);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), order[..5]);
        for &(t, p) in &lp.top {
            assert!((p as f64 - (l[t as usize] as f64 - log_z)).abs() < 1e-4);
        }
    }
    engine.release(&mut seq);
}

#[test]
fn penalties_apply_at_every_step_as_llama_cpp_defines_them() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let ids = prompt(&engine, "Tell me about cats, as JSON.");
    let penalties = Penalties { repetition: 1.3, frequency: 0.4, presence: 0.3, last_n: 16 };
    let plain = generate(&mut engine, &ids, &SamplingParams::greedy(24));
    let g = generate(&mut engine, &ids, &SamplingParams { penalties: penalties.clone(), ..SamplingParams::greedy(24) });
    assert_ne!(g.tokens, plain.tokens, "penalties changed nothing: {:?}", g.text);
    for i in 0..g.tokens.len() {
        let history = [&ids[..], &g.tokens[..i]].concat();
        let mut l = logits_after(&mut engine, &history);
        let window = &history[history.len() - 16..];
        let mut seen = std::collections::BTreeSet::new();
        for &t in window {
            if seen.insert(t) {
                let count = window.iter().filter(|&&w| w == t).count() as f32;
                let x = &mut l[t as usize];
                *x = if *x <= 0.0 { *x * 1.3 } else { *x / 1.3 } - count * 0.4 - 0.3;
            }
        }
        assert_eq!(g.tokens[i], argmax(&l), "step {i}");
    }
}

#[test]
fn logit_bias_moves_a_token_up_or_out() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let ids = prompt(&engine, "What is the capital of France?");
    let plain = generate(&mut engine, &ids, &SamplingParams::greedy(4));
    let banana = engine.tokenizer.encode("banana", false).unwrap()[0];
    let forced = generate(&mut engine, &ids, &SamplingParams { logit_bias: vec![(banana, 100.0)], ..SamplingParams::greedy(4) });
    assert_eq!(forced.tokens, vec![banana; 4]);
    let banned = generate(&mut engine, &ids, &SamplingParams { logit_bias: vec![(plain.tokens[0], -100.0)], ..SamplingParams::greedy(4) });
    assert_ne!(banned.tokens[0], plain.tokens[0]);
}

#[test]
fn request_fields_are_checked_by_name() {
    let check = |json: &str| -> Result<(), String> {
        let fields: RequestFields = serde_json::from_str(json).map_err(|e| e.to_string())?;
        fields.sampling(49152, Dialect::Generic, || 0).map(drop)
    };
    let fails = |json: &str, names: &str| {
        let e = check(json).expect_err(json);
        assert!(e.contains(names), "{json}: {e}");
    };
    assert!(check(r#"{"prompt": "x", "n": 2, "logprobs": true, "top_logprobs": 3, "logit_bias": {"42": -5}, "frequency_penalty": 0.5, "max_completion_tokens": 8}"#).is_ok());
    assert!(check(r#"{"prompt": "x", "logprobs": 4, "max_tokens": 8, "max_completion_tokens": 8}"#).is_ok());
    fails(r#"{"prompt": "x", "prediction": {}}"#, "unknown field `prediction`");
    fails(r#"{"prompt": "x", "best_of": 2}"#, "unknown field `best_of`");
    fails(r#"{"prompt": "x", "n": 0}"#, "n must be between 1 and 16");
    fails(r#"{"prompt": "x", "n": 17}"#, "n must be between 1 and 16");
    fails(r#"{"prompt": "x", "top_logprobs": 2}"#, "top_logprobs needs logprobs: true");
    fails(r#"{"prompt": "x", "logprobs": true, "top_logprobs": 21}"#, "top_logprobs must be at most 20");
    fails(r#"{"prompt": "x", "logit_bias": {"49152": 1}}"#, "logit_bias keys must be token ids");
    fails(r#"{"prompt": "x", "logit_bias": {"cat": 1}}"#, "logit_bias keys must be token ids");
    fails(r#"{"prompt": "x", "logit_bias": {"5": 101}}"#, "logit_bias values must be a number in [-100, 100]");
    fails(r#"{"prompt": "x", "frequency_penalty": 2.5}"#, "frequency_penalty must be a number in [-2, 2]");
    fails(r#"{"prompt": "x", "repetition_penalty": 0}"#, "repetition_penalty must be a number > 0");
    fails(r#"{"prompt": "x", "max_tokens": 4, "max_completion_tokens": 5}"#, "disagree");
    fails(r#"{"prompt": "x", "temperature": -0.5}"#, "temperature must be a number >= 0");
    fails(r#"{"prompt": "x", "top_p": 0}"#, "top_p must be in (0, 1]");
    fails(r#"{"prompt": "x", "max_tokens": 0}"#, "max_tokens must be at least 1");
    fails(r#"{"prompt": "x", "max_tokens": -1}"#, "invalid value: integer `-1`");
    fails(r#"{"prompt": "x", "stop": ["a", ""]}"#, "stop strings must not be empty");
    let completion: RequestFields = serde_json::from_str(r#"{"prompt": "x", "logprobs": true}"#).unwrap();
    assert!(completion.completion_prompt().unwrap_err().contains("number of alternatives"));
    let chat: RequestFields = serde_json::from_str(r#"{"messages": [{"role": "user", "content": "x"}], "logprobs": 2}"#).unwrap();
    assert!(chat.conversation(Dialect::Generic).unwrap_err().contains("true or false"));
    // An explicit null is an unset field, as in OpenAI's API.
    assert!(check(r#"{"prompt": "x", "stop": null, "ignore_eos": null, "n": null, "response_format": null}"#).is_ok());
}
