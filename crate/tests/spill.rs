//! The spill tier end to end: KV pages quantized on the GPU, kept in a directory store and
//! restored into fresh pages. A restored prefix must continue exactly as a cold run (q8) and
//! differently from the suffix alone; q4's drift is measured; every kind of bad record is a
//! miss that is deleted; a full store never fails a request; a second process restores what
//! a first one wrote.

mod common;

use std::path::Path;

use common::Backend;

use radixlm::bench::Agreement;
use radixlm::engine::sampling::SamplingParams;
use radixlm::engine::{Engine, EngineOptions, Generation, Sequence};
use radixlm::gpu::context::LimitsPolicy;
use radixlm::kv::spill::dir_store::DirStore;
use radixlm::kv::spill::{group_size, QuantLayout, SpillFormat};
use radixlm::kv::{chain, PageHash};
use radixlm::model::synthetic::SyntheticSpec;

const PAGE: usize = 16;

const DOCUMENT: &str = "The lighthouse on the northern cape was built in 1871 from granite quarried on \
the island itself. Its first keeper, Margaret Olsen, kept the lamp burning through forty winters and \
recorded every ship that passed in a leather log that is now kept in the town museum. The tower is \
thirty-two metres tall, its light flashes white twice every ten seconds, and on clear nights it can be \
seen from twenty-two nautical miles away.";
const QUESTION: &str = " Question: who was the first keeper of the lighthouse, and what did she record? Answer:";

fn tiny_model() -> Vec<u8> {
    SyntheticSpec { tied_embeddings: false, ..SyntheticSpec::tiny() }.to_gguf()
}

/// An engine over `bytes` spilling `format` pages into a directory store at `dir`.
fn engine(backend: Backend, bytes: &[u8], dir: &Path, format: SpillFormat, opts: EngineOptions) -> Engine {
    let opts = EngineOptions { spill: Some(format), ..opts };
    let mut engine = backend.load(bytes, &opts);
    let store = DirStore::open(dir, opts.spill_budget_bytes).unwrap();
    assert!(engine.poller().block_on(engine.attach_spill_store(Box::new(store))), "spilling is on");
    engine
}

use common::run_greedy as run;

/// Both tiers empty, then one greedy run.
fn cold(engine: &mut Engine, prompt: &[u32], n: usize) -> Generation {
    let poller = engine.poller();
    engine.clear_cache();
    poller.block_on(engine.clear_spill());
    run(engine, prompt, n)
}

/// Computes `prefix`, writes its pages to the store and clears the GPU tier.
fn spill_prefix(engine: &mut Engine, prefix: &[u32]) {
    let poller = engine.poller();
    engine.clear_cache();
    run(engine, prefix, 1);
    poller.block_on(engine.write_behind());
    engine.clear_cache();
}

fn prompt_and_suffix(engine: &Engine, doc: &str, question: &str) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let prefix = engine.tokenizer.encode(doc, true).unwrap();
    let suffix = engine.tokenizer.encode(question, false).unwrap();
    let prompt = prefix.iter().chain(&suffix).copied().collect();
    (prefix, suffix, prompt)
}

#[test]
fn real_kv_pages_round_trip_within_the_budget_on_the_gpu() {
    let bytes = common::default_model_bytes();
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine(Backend::Gpu(LimitsPolicy::Adapter), &bytes, dir.path(), SpillFormat::Q8, EngineOptions::default());
    let (poller, gpu) = (engine.poller(), engine.gpu().unwrap().clone());
    let (_, _, prompt) = prompt_and_suffix(&engine, DOCUMENT, QUESTION);
    let mut seq = Sequence::default();
    poller.block_on(engine.logits(&mut seq, &prompt)).unwrap();
    // Real keys (after RoPE) and values of four pages, every layer.
    let pages: Vec<u32> = seq.pages()[..4].to_vec();
    let per_page: Vec<Vec<Vec<f32>>> = pages.iter().map(|&p| poller.block_on(engine.kv_page_values(p)).unwrap()).collect();
    engine.release(&mut seq);
    let n_lk = per_page[0].len();
    let slices: Vec<Vec<f32>> = (0..n_lk).map(|lk| per_page.iter().flat_map(|p| p[lk].iter().copied()).collect()).collect();
    let page_values = slices[0].len() / pages.len();
    let group = group_size(engine.cfg.head_dim).unwrap();
    for (format, max_rel) in [(SpillFormat::Q8, 0.01), (SpillFormat::Q4, 0.15)] {
        let c = common::check_kv_quant(&gpu, QuantLayout { format, group }, page_values, &slices, &[2, 0, 3]);
        println!("{format:?} on real K/V: relative L2 error {:.5}, worst error / bound {:.3}, {} of {} levels off by one", c.rel_err, c.worst_error_over_bound, c.levels_off_by_one, c.values);
        assert!(c.worst_error_over_bound <= 1.0, "{format:?}: {c:?}");
        assert!(c.rel_err <= max_rel, "{format:?}: relative error {} over {max_rel}", c.rel_err);
    }
}

on_each_backend!(restored_q8_prefixes_continue_exactly_as_cold_runs, |backend: Backend| {
    let bytes = common::default_model_bytes();
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine(backend, &bytes, dir.path(), SpillFormat::Q8, EngineOptions::default());
    let chat_system = "<|im_start|>system\nYou are a careful assistant. Answer from the document only, in one sentence.\n\n".to_string() + DOCUMENT + "<|im_end|>\n";
    let mut cases = vec![(chat_system, "<|im_start|>user\nHow tall is the tower?<|im_end|>\n<|im_start|>assistant\n"), (DOCUMENT.to_string(), QUESTION)];
    // On the GPU (a software adapter in CI, half a second a step) the chat case only, over 16
    // tokens: the device's part, pages decoded from the store into its pool, is the same for both.
    let mut steps = 32;
    if matches!(backend, Backend::Gpu(_)) {
        cases.truncate(1);
        steps = 16;
    }
    for (doc, question) in &cases {
        let (prefix, suffix, prompt) = prompt_and_suffix(&engine, doc, question);
        let cold_run = cold(&mut engine, &prompt, steps);
        spill_prefix(&mut engine, &prefix);
        let restored = run(&mut engine, &prompt, steps);
        assert_eq!(restored.stats.reused_tokens, 0, "the GPU tier was cleared");
        assert_eq!(restored.stats.restored_tokens, prefix.len() / PAGE * PAGE, "every whole page of the prefix comes back");
        assert_eq!(restored.stats.prefilled_tokens, prompt.len() - restored.stats.restored_tokens);
        assert_eq!(restored.tokens, cold_run.tokens, "restored greedy tokens differ from cold for {question:?}");
        let control = cold(&mut engine, &suffix, steps);
        assert_ne!(restored.tokens, control.tokens, "restored equals the suffix-alone control for {question:?}");
    }
});

on_each_backend!(pages_evicted_from_the_gpu_are_spilled_then_restored, |backend: Backend| {
    let bytes = tiny_model();
    let dir = tempfile::tempdir().unwrap();
    let cfg = radixlm::model::Config::from_gguf(&radixlm::gguf::GgufFile::parse(&bytes).unwrap()).unwrap();
    // Room for 12 pages: the second prompt cannot fit beside the first.
    let kv = 12 * radixlm::kv::page_bytes(&cfg, PAGE);
    let mut engine = engine(backend, &bytes, dir.path(), SpillFormat::Q8, EngineOptions { kv_budget_bytes: kv, max_batch: 32, ..Default::default() });
    let poller = engine.poller();
    let a: Vec<u32> = (0..100).map(|i| (i * 7 + 3) % 500).collect();
    let b: Vec<u32> = (0..150).map(|i| (i * 11 + 5) % 500).collect();
    let question: Vec<u32> = (0..20).map(|i| (i * 13 + 1) % 500).collect();
    let prompt: Vec<u32> = a.iter().chain(&question).copied().collect();
    let cold_run = cold(&mut engine, &prompt, 32);
    engine.clear_cache();
    run(&mut engine, &a, 1);
    run(&mut engine, &b, 1);
    let pending = engine.spill_stats().unwrap().pending_pages;
    assert!(pending >= a.len() / PAGE, "A's pages were captured when B evicted them ({pending} pending)");
    poller.block_on(engine.write_behind());
    let restored = run(&mut engine, &prompt, 32);
    assert_eq!(restored.stats.restored_tokens, a.len() / PAGE * PAGE);
    assert_eq!(restored.tokens, cold_run.tokens);
    let control = cold(&mut engine, &question, 32);
    assert_ne!(restored.tokens, control.tokens);
});

/// Top-1 agreement with `cold_tokens`, teacher-forced over a restored prefix: cold's tokens are
/// fed one by one and each step whose greedy choice is cold's next token counts.
fn teacher_forced_agreement(engine: &mut Engine, prefix: &[u32], prompt: &[u32], cold_tokens: &[u32]) -> usize {
    let poller = engine.poller();
    spill_prefix(engine, prefix);
    let mut seq = Sequence::default();
    let mut history = prompt.to_vec();
    let mut req = engine.start(&mut seq, &history, &SamplingParams::greedy(1)).unwrap();
    let first = loop {
        match poller.block_on(engine.step(&mut req)).unwrap() {
            radixlm::engine::Step::Token { token, .. } => break token,
            radixlm::engine::Step::Done { generation, .. } => break generation.tokens[0],
            radixlm::engine::Step::Prefill { .. } => {}
        }
    };
    engine.abort(&mut req);
    let mut seq = req.into_sequence();
    let mut agree = usize::from(first == cold_tokens[0]);
    for i in 0..cold_tokens.len() - 1 {
        history.push(cold_tokens[i]);
        let logits = poller.block_on(engine.logits(&mut seq, &history)).unwrap();
        let best = logits.iter().enumerate().fold(0, |b, (j, &l)| if l > logits[b] { j } else { b }) as u32;
        agree += usize::from(best == cold_tokens[i + 1]);
    }
    engine.release(&mut seq);
    agree
}

/// On the CPU backend: the agreement is the spill format's, and the GPU's quantization is held to
/// the CPU's level by level (within one) on real K/V pages by the round-trip test above, and its
/// restored q8 runs to exactness by the restored-prefix test.
#[test]
fn q4_agreement_with_cold_runs_on_the_default_model() {
    let backend = Backend::Cpu;
    let steps: usize = 256;
    let bytes = common::default_model_bytes();
    let mut agreement = Vec::new();
    for format in [SpillFormat::Q8, SpillFormat::Q4] {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = engine(backend, &bytes, dir.path(), format, EngineOptions::default());
        let (prefix, _, prompt) = prompt_and_suffix(&engine, DOCUMENT, QUESTION);
        let cold_run = cold(&mut engine, &prompt, steps);
        let (cold_tokens, cold_gaps) = (cold_run.tokens, cold_run.top2_gaps);
        spill_prefix(&mut engine, &prefix);
        let restored = run(&mut engine, &prompt, 32);
        assert_eq!(restored.stats.restored_tokens, prefix.len() / PAGE * PAGE);
        let greedy = Agreement::of(&cold_tokens[..32], &cold_gaps[..32], &restored.tokens);
        let agree = teacher_forced_agreement(&mut engine, &prefix, &prompt, &cold_tokens);
        println!("{format:?} restored vs cold over 32 greedy tokens: {greedy}; top-1 agreement over {steps} decode steps {agree} / {steps}");
        agreement.push((format, greedy, agree));
    }
    // Measured: q8 32 of 32 and 255 / 256; q4 3 of 32 then a near tie, and 253 / 256.
    for (format, greedy, agree) in agreement {
        let min_agree = match format {
            SpillFormat::Q8 => {
                assert_eq!(greedy, Agreement::Exact { tokens: 32 }, "q8 restored run left cold's greedy path: {greedy}");
                steps * 98 / 100
            }
            SpillFormat::Q4 => {
                assert!(greedy.passes(), "q4 restored run left cold's greedy path at a decisive step: {greedy}");
                steps * 88 / 100
            }
        };
        assert!(agree >= min_agree, "{format:?} top-1 agreement {agree} / {steps} under {min_agree}");
    }
}

/// The file holding the record of `prompt`'s first page in a directory store at `dir`.
fn first_record(engine: &Engine, dir: &Path, prompt: &[u32]) -> std::path::PathBuf {
    let hash = chain(PageHash::root(engine.fingerprint), &prompt[..PAGE]);
    dir.join(format!("{:032x}", engine.fingerprint)).join(format!("{:032x}.rxkv", hash.0))
}

/// Rewrites a record's checksum after a deliberate edit, so only the edited field is wrong.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..n]);
    bytes[n..].copy_from_slice(&sum.to_le_bytes());
}

on_each_backend!(every_kind_of_bad_record_is_a_deleted_miss_and_output_equals_cold, |backend: Backend| {
    let bytes = tiny_model();
    let other_model = SyntheticSpec { tied_embeddings: false, seed: 99, ..SyntheticSpec::tiny() }.to_gguf();
    let prefix: Vec<u32> = (0..64).map(|i| (i * 7 + 3) % 500).collect();
    let question: Vec<u32> = (0..9).map(|i| (i * 13 + 1) % 500).collect();
    let prompt: Vec<u32> = prefix.iter().chain(&question).copied().collect();

    // The other model's record of the same tokens: valid bytes, wrong fingerprint.
    let other_dir = tempfile::tempdir().unwrap();
    let mut other = engine(backend, &other_model, other_dir.path(), SpillFormat::Q8, EngineOptions::default());
    spill_prefix(&mut other, &prefix);
    let foreign = std::fs::read(first_record(&other, other_dir.path(), &prompt)).unwrap();
    drop(other);

    let corruptions: [(&str, Box<dyn Fn(&mut Vec<u8>)>); 6] = [
        ("truncated", Box::new(|b: &mut Vec<u8>| b.truncate(b.len() / 2))),
        ("a flipped byte", Box::new(|b: &mut Vec<u8>| {
            let at = b.len() / 2;
            b[at] ^= 0x40;
        })),
        ("another model's record", Box::new(move |b: &mut Vec<u8>| *b = foreign.clone())),
        ("a foreign format version", Box::new(|b: &mut Vec<u8>| {
            b[4..8].copy_from_slice(&99u32.to_le_bytes());
            reseal(b);
        })),
        ("tokens that do not match", Box::new(|b: &mut Vec<u8>| {
            b[80] ^= 1;
            reseal(b);
        })),
        ("a half-written temporary file", Box::new(|b: &mut Vec<u8>| b.clear())),
    ];
    for (what, corrupt) in corruptions {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = engine(backend, &bytes, dir.path(), SpillFormat::Q8, EngineOptions::default());
        let cold_run = cold(&mut engine, &prompt, 32);
        spill_prefix(&mut engine, &prefix);
        let path = first_record(&engine, dir.path(), &prompt);
        let original = std::fs::read(&path).unwrap();
        let mut record = original.clone();
        corrupt(&mut record);
        let half_written = record.is_empty();
        if half_written {
            // A writer died before its rename: only the first half of a temporary file exists.
            std::fs::remove_file(&path).unwrap();
            std::fs::write(path.with_extension("rxkv.tmp-1-1"), &original[..original.len() / 2]).unwrap();
        } else {
            std::fs::write(&path, &record).unwrap();
        }
        let restored = run(&mut engine, &prompt, 32);
        assert_eq!(restored.stats.restored_tokens, 0, "{what}: a bad first page is a miss");
        assert_eq!(restored.tokens, cold_run.tokens, "{what}: output differs from the cold run");
        let rejected = engine.spill_stats().unwrap().counters.records_rejected;
        if half_written {
            assert_eq!(rejected, 0, "{what}: nothing was read");
        } else {
            assert!(!path.exists(), "{what}: the bad record was deleted");
            assert_eq!(rejected, 1, "{what}: counted as rejected");
        }
    }
});

on_each_backend!(a_full_store_never_fails_a_request, |backend: Backend| {
    let bytes = tiny_model();
    let prompt: Vec<u32> = (0..80).map(|i| (i * 7 + 3) % 500).collect();
    let mut reference = None;
    // Smaller than one record (4,760 bytes for this model); then room for two of the five
    // pages the prompt and its reply fill.
    for (budget, records) in [(1024, 0), (10_000, 2)] {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = engine(backend, &bytes, dir.path(), SpillFormat::Q8, EngineOptions { spill_budget_bytes: budget, ..Default::default() });
        let poller = engine.poller();
        let cold_run = cold(&mut engine, &prompt, 16);
        spill_prefix(&mut engine, &prompt);
        let stats = engine.spill_stats().unwrap();
        assert!(stats.store.bytes <= budget, "the store keeps its budget: {stats:?}");
        assert_eq!(stats.store.records, records, "{stats:?}");
        assert_eq!(stats.counters.store_errors, 0, "{stats:?}");
        let again = run(&mut engine, &prompt, 16);
        poller.block_on(engine.write_behind());
        assert_eq!(again.tokens, cold_run.tokens, "budget {budget}");
        assert!(reference.get_or_insert(cold_run.tokens.clone()) == &cold_run.tokens);
    }
});

#[test]
fn a_second_process_restores_what_the_first_wrote_on_either_backend() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    std::fs::write(&model, tiny_model()).unwrap();
    let cache = dir.path().join("kv");
    let generate = |backend: &str| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_radixlm"))
            .args(["generate", "--backend", backend, "--json", "--max-tokens", "16", "--prompt"])
            .arg("A lighthouse keeper's log, page one: wind north-east, sea calm, two ships passed. Next:")
            .arg("--model")
            .arg(&model)
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // Records are the same on both backends: each restores what the other wrote.
    for (writer, reader) in [("gpu", "cpu"), ("cpu", "gpu")] {
        let _ = std::fs::remove_dir_all(&cache);
        let first = generate(writer);
        let second = generate(reader);
        assert_eq!(first["stats"]["restored_tokens"], 0);
        let prompt_len = first["prompt_ids"].as_array().unwrap().len();
        assert_eq!(second["stats"]["restored_tokens"].as_u64().unwrap() as usize, (prompt_len - 1) / PAGE * PAGE, "{writer} → {reader}");
        assert_eq!(first["tokens"], second["tokens"], "{writer} → {reader}");
    }
}
