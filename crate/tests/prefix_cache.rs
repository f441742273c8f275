//! The prefix cache end to end: a warm request (its prefix cached) must continue exactly as a
//! cold one (empty cache) and differently from the suffix alone, at page edges, across
//! branches, after eviction, with pinning, under eviction pressure, and over a multi-turn chat.

mod common;

use common::Backend;

use radixlm::engine::sampling::SamplingParams;
use radixlm::engine::session::ChatSession;
use radixlm::engine::{Engine, EngineOptions};
use radixlm::kv::page_bytes;
use radixlm::model::synthetic::SyntheticSpec;

const PAGE: usize = 16;
const CHECK_TOKENS: usize = 32;

const DOCUMENT: &str = "The lighthouse on the northern cape was built in 1871 from granite quarried on \
the island itself. Its first keeper, Margaret Olsen, kept the lamp burning through forty winters and \
recorded every ship that passed in a leather log that is now kept in the town museum. The tower is \
thirty-two metres tall, its light flashes white twice every ten seconds, and on clear nights it can be \
seen from twenty-two nautical miles away. In 1952 the oil lamp was replaced by an electric one.";
const QUESTION: &str = " Question: who was the first keeper of the lighthouse, and what did she record? Answer:";

fn engine_with(backend: Backend, bytes: &[u8], opts: EngineOptions) -> Engine {
    backend.load(bytes, &opts)
}

fn config(bytes: &[u8]) -> radixlm::model::Config {
    radixlm::model::Config::from_gguf(&radixlm::gguf::GgufFile::parse(bytes).unwrap()).unwrap()
}

fn real_engine(backend: Backend, opts: EngineOptions) -> Engine {
    engine_with(backend, &common::default_model_bytes(), opts)
}

/// A synthetic model whose continuations depend on the whole prompt (untied: with tied
/// embeddings a random model just repeats its last input token, and every continuation would
/// look alike).
fn synthetic_model() -> Vec<u8> {
    SyntheticSpec { tied_embeddings: false, ..SyntheticSpec::tiny() }.to_gguf()
}

use common::run_greedy as run;

fn cycle(tokens: &[u32], n: usize) -> Vec<u32> {
    tokens.iter().copied().cycle().take(n).collect()
}

/// Cold and warm runs for one prefix length and delta, and with `control` the suffix alone.
fn check_warm_equals_cold(engine: &mut Engine, doc: &[u32], question: &[u32], p: usize, d: usize, control: bool) {
    let prefix = cycle(doc, p);
    let suffix = cycle(question, d);
    let prompt: Vec<u32> = prefix.iter().chain(&suffix).copied().collect();
    engine.clear_cache();
    let cold = run(engine, &prompt, CHECK_TOKENS);
    assert_eq!(cold.stats.reused_tokens, 0);
    engine.clear_cache();
    run(engine, &prefix, 1);
    let warm = run(engine, &prompt, CHECK_TOKENS);
    // Whole pages of the prefix are reused; the prompt's last token is always recomputed.
    let expect_reused = (p / PAGE * PAGE).min(prompt.len() - 1);
    assert_eq!(warm.stats.reused_tokens, expect_reused, "P={p} D={d}: reused tokens");
    assert_eq!(warm.stats.prefilled_tokens, prompt.len() - expect_reused, "P={p} D={d}: prefilled tokens");
    assert_eq!(warm.tokens, cold.tokens, "P={p} D={d}: warm greedy tokens differ from cold");
    if control {
        engine.clear_cache();
        let control = run(engine, &suffix, CHECK_TOKENS);
        assert_ne!(warm.tokens, control.tokens, "P={p} D={d}: warm equals the suffix-alone control");
    }
}

on_each_backend!(page_edges_on_a_synthetic_model_every_prefix_and_delta, |backend: Backend| {
    let mut engine = engine_with(backend, &synthetic_model(), EngineOptions { max_batch: 32, ..Default::default() });
    let doc: Vec<u32> = (0..200).map(|i| (i * 37 % 250) as u32).collect();
    let question: Vec<u32> = (0..40).map(|i| (i * 11 % 250) as u32 + 3).collect();
    for p in [PAGE - 1, PAGE, PAGE + 1, 3 * PAGE - 1, 3 * PAGE + 1, 5 * PAGE] {
        for d in [1, PAGE - 1, PAGE, PAGE + 1] {
            check_warm_equals_cold(&mut engine, &doc, &question, p, d, true);
        }
    }
});

on_each_backend!(page_edges_on_the_real_model, |backend: Backend| {
    let mut engine = real_engine(backend, EngineOptions::default());
    let doc = engine.tokenizer.encode(DOCUMENT, false).unwrap();
    let question = engine.tokenizer.encode(QUESTION, false).unwrap();
    // One prompt of each kind — a prefix just short of a page, one just past it, one just short
    // of a later page — each with another delta; the full cross product of prefix lengths
    // (page − 1, page, page + 1, k·page ± 1) and deltas (1, page − 1, page, page + 1) runs on the
    // synthetic model above, where a step costs milliseconds rather than a second. That these
    // prompts' continuations depend on the prefix (the suffix-alone control) is the model's
    // property: the CPU backend shows it, and the GPU is spared those steps.
    for (p, d) in [(PAGE - 1, 1), (PAGE + 1, PAGE), (3 * PAGE - 1, PAGE + 1)] {
        check_warm_equals_cold(&mut engine, &doc, &question, p, d, backend == Backend::Cpu);
    }
});

/// Branches off one cached prefix: each continues as its cold run, and the prefix's pages are
/// cached once, not once per branch.
fn check_branches(engine: &mut Engine, prefix: &[u32], branches: &[Vec<u32>]) {
    assert!(prefix.len() >= 3 * PAGE);
    let prompts: Vec<Vec<u32>> = branches.iter().map(|b| prefix.iter().chain(b).copied().collect()).collect();
    let cold: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            engine.clear_cache();
            run(engine, p, CHECK_TOKENS).tokens
        })
        .collect();
    engine.clear_cache();
    for (i, p) in prompts.iter().enumerate() {
        let g = run(engine, p, CHECK_TOKENS);
        assert_eq!(g.tokens, cold[i], "branch {i}: warm differs from cold");
        if i > 0 {
            assert!(g.stats.reused_tokens >= 3 * PAGE, "branch {i} reused only {}", g.stats.reused_tokens);
        }
    }
    // Zero copies: the shared prefix's three pages are cached once, not once per branch.
    let stats = engine.cache_stats();
    let per_branch_pages: usize = prompts.iter().map(|p| (p.len() + CHECK_TOKENS - 1) / PAGE).sum();
    assert!(stats.cached_pages <= per_branch_pages - 2 * 3, "{stats:?}");
}

// The cache's logic is the backend's too: on the real model it runs on the CPU backend, and the
// GPU's part (device pages shared, evicted, pinned and written again at offsets) on a synthetic
// model, where a step on the software adapter of CI costs milliseconds rather than half a second.
// page_edges_on_the_real_model and a_five_turn_chat run the real model on both.

#[test]
fn branches_share_the_prefix_pages_and_each_matches_its_cold_run() {
    let mut engine = real_engine(Backend::Cpu, EngineOptions::default());
    let doc = engine.tokenizer.encode(DOCUMENT, false).unwrap();
    let branches = [" Question: how tall is the tower? Answer:", " Question: when was it built? Answer:", " In short,"];
    let branches: Vec<Vec<u32>> = branches.iter().map(|b| engine.tokenizer.encode(b, false).unwrap()).collect();
    check_branches(&mut engine, &cycle(&doc, 3 * PAGE + 5), &branches);
}

on_each_backend!(branches_on_a_synthetic_model, |backend: Backend| {
    let mut engine = engine_with(backend, &synthetic_model(), EngineOptions::default());
    let prefix: Vec<u32> = (0..3 * PAGE as u32 + 5).map(|i| i * 37 % 500 + 3).collect();
    let branches: Vec<Vec<u32>> = (0..3u32).map(|b| (0..9 + 4 * b).map(|i| (i * 11 + 97 * b) % 500 + 3).collect()).collect();
    check_branches(&mut engine, &prefix, &branches);
});

/// Twelve pages of KV: a pinned system prompt survives prompts that evict each other, and an
/// identical prompt is served from the cache with identical output.
/// `inputs` gives the system prompt and a document of at least 90 tokens.
fn check_eviction_and_pinning(backend: Backend, bytes: &[u8], inputs: impl Fn(&Engine) -> (Vec<u32>, Vec<u32>)) {
    let budget = 12 * page_bytes(&config(bytes), PAGE);
    let mut engine = engine_with(backend, bytes, EngineOptions { kv_budget_bytes: budget, ..Default::default() });
    assert_eq!(engine.kv_capacity_tokens(), 12 * PAGE);
    let (system, doc) = inputs(&engine);
    let (system, doc) = (&system[..], &doc[..]);
    let poller = engine.poller();
    let pinned = poller.block_on(engine.pin(system)).unwrap();
    assert_eq!(pinned, system.len() / PAGE * PAGE);
    assert!(pinned >= PAGE);

    let a: Vec<u32> = cycle(doc, 70);
    // B alone needs 10 of the 12 pages: all of A must go.
    let b: Vec<u32> = cycle(&doc[13..], 150);
    let cold_a = run(&mut engine, &a, CHECK_TOKENS);
    // Identical prompt twice: identical output, the second served from the cache.
    let again = run(&mut engine, &a, CHECK_TOKENS);
    assert_eq!(again.tokens, cold_a.tokens);
    assert_eq!(again.stats.reused_tokens, 64);
    run(&mut engine, &b, 8);
    let after = run(&mut engine, &a, CHECK_TOKENS);
    assert_eq!(after.tokens, cold_a.tokens, "A after eviction differs from cold A");
    assert!(after.stats.reused_tokens < 64, "A's pages should have been evicted by B");
    // The pinned system prompt survived all of it.
    let with_system: Vec<u32> = system.iter().chain(&a[..20]).copied().collect();
    let g = run(&mut engine, &with_system, 4);
    assert_eq!(g.stats.reused_tokens, pinned, "pinned prefix was evicted");
    assert!(engine.cache_stats().pinned_pages >= pinned / PAGE);
}

#[test]
fn eviction_pinning_and_identical_prompts() {
    check_eviction_and_pinning(Backend::Cpu, &common::default_model_bytes(), |engine| {
        let system = "<|im_start|>system\nYou are a careful assistant who answers briefly and never invents facts.<|im_end|>\n";
        (engine.tokenizer.encode(system, false).unwrap(), engine.tokenizer.encode(DOCUMENT, false).unwrap())
    });
}

on_each_backend!(eviction_pinning_on_a_synthetic_model, |backend: Backend| {
    check_eviction_and_pinning(backend, &synthetic_model(), |_| {
        ((0..21).map(|i| i * 29 % 500 + 3).collect(), (0..90).map(|i| i * 41 % 500 + 3).collect())
    });
});

#[test]
fn interleaved_facts_under_eviction_pressure_never_cross() {
    let bytes = common::default_model_bytes();
    // Five pages: the shared preamble (two pages) stays while the two branches evict each other.
    let budget = 5 * page_bytes(&config(&bytes), PAGE);
    let mut engine = engine_with(Backend::Cpu, &bytes, EngineOptions { kv_budget_bytes: budget, ..Default::default() });
    let prompt = |word: &str| {
        format!(
            "<|im_start|>system\nYou are a helpful assistant in a word game. The user will ask for a secret \
             word, and you must answer with it exactly, in capitals. The secret code word is {word}. Repeat it \
             exactly when asked.<|im_end|>\n<|im_start|>user\nWhat is the code word?<|im_end|>\n<|im_start|>assistant\n"
        )
    };
    let words = ["PINEAPPLE", "TELESCOPE"];
    let prompts: Vec<Vec<u32>> = words.iter().map(|w| engine.tokenizer.encode(&prompt(w), false).unwrap()).collect();
    let shared = prompts[0].iter().zip(&prompts[1]).take_while(|(a, b)| a == b).count();
    assert!(shared >= 2 * PAGE, "the prompts should share at least two pages ({shared} tokens)");
    let mut reused = 0;
    for round in 0..3 {
        for (i, p) in prompts.iter().enumerate() {
            let g = run(&mut engine, p, 12);
            assert!(g.text.contains(words[i]), "round {round}: answer {:?} lacks {}", g.text, words[i]);
            assert!(!g.text.contains(words[1 - i]), "round {round}: answer {:?} has the other word", g.text);
            reused += g.stats.reused_tokens;
        }
    }
    assert!(reused >= 5 * (shared / PAGE * PAGE), "the shared preamble should be reused ({reused} tokens)");
}

on_each_backend!(a_five_turn_chat_prefills_only_each_new_message, |backend: Backend| {
    let mut engine = real_engine(backend, EngineOptions::default());
    let poller = engine.poller();
    let mut session = ChatSession::new(Some("You are a helpful assistant. Keep answers short."));
    let params = SamplingParams::greedy(8);
    let turns = ["Hi! My name is Ada.", "What is two plus two?", "Name a colour.", "And an animal?", "What is my name?"];
    // ChatML around a user message: the end of the previous reply's turn, the user turn's
    // opening, and after the message its end and the assistant turn's opening.
    let tok = |s: &str| engine.tokenizer.encode(s, false).unwrap().len();
    let template_tokens = tok("<|im_end|>\n<|im_start|>user\n") + tok("<|im_end|>\n<|im_start|>assistant\n");
    let mut previous_prompt = 0;
    for (n, user) in turns.iter().enumerate() {
        let g = poller.block_on(session.send(&mut engine, user, &params, |_| true)).unwrap();
        assert_eq!(g.stats.reused_tokens + g.stats.prefilled_tokens, g.stats.prompt_tokens);
        if n > 0 {
            // New: this message with its template tokens, plus the previous reply's last token
            // when that reply ended at max_tokens (sampled, never run through the model).
            let user_tokens = engine.tokenizer.encode(user, false).unwrap().len();
            assert!(
                g.stats.prefilled_tokens <= 1 + user_tokens + template_tokens,
                "turn {n}: prefilled {} tokens for a {user_tokens}-token message",
                g.stats.prefilled_tokens
            );
            assert!(g.stats.reused_tokens > previous_prompt, "turn {n}: reused {} of the previous {previous_prompt}-token prompt", g.stats.reused_tokens);
        }
        previous_prompt = g.stats.prompt_tokens;
    }
});
