//! Models loaded as a stream of chunks, and requests driven a step at a time: what the browser
//! worker does, checked natively against the one-shot paths.

mod common;

use common::Backend;

use radixlm::engine::sampling::SamplingParams;
use radixlm::engine::{Engine, EngineError, EngineOptions, FinishReason, ModelLoader, Poller, Sequence, Step};
use radixlm::gguf::{GgufError, GgufFile, GgufHeader};
use radixlm::model::fingerprint::fingerprint;
use radixlm::model::synthetic::SyntheticSpec;
use radixlm::tokenizer::Message;

/// Untied, so greedy replies vary with the context (a tied random model repeats its input),
/// and with a vocabulary large enough that the file outgrows the loader's first header read.
fn model() -> Vec<u8> {
    let bytes = SyntheticSpec { tied_embeddings: false, vocab_size: 6000, ..SyntheticSpec::tiny() }.to_gguf();
    assert!(bytes.len() > 3 << 19, "{} bytes", bytes.len());
    bytes
}

fn load_chunked(backend: Backend, bytes: &[u8], chunk: usize, known_len: bool, opts: EngineOptions) -> Result<Engine, EngineError> {
    let target = backend.target();
    let poller = Poller::for_target(&target);
    let mut loader = ModelLoader::new(target, opts, known_len.then_some(bytes.len() as u64));
    for c in bytes.chunks(chunk) {
        loader.push(c)?;
    }
    assert_eq!(loader.pushed(), bytes.len() as u64);
    poller.block_on(loader.finish())
}

fn logits(engine: &mut Engine, tokens: &[u32]) -> Vec<f32> {
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let l = poller.block_on(engine.logits(&mut seq, tokens)).unwrap();
    engine.release(&mut seq);
    l
}

on_each_backend!(a_model_streamed_in_any_chunk_size_equals_the_one_shot_load, |backend: Backend| {
    let backend = backend.with_webgpu_limits();
    let bytes = model();
    let want_fp = fingerprint(&GgufFile::parse(&bytes).unwrap());
    let mut one_shot = backend.try_load(&bytes, &EngineOptions::default()).unwrap();
    assert_eq!(one_shot.fingerprint, want_fp);
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 % 500) as u32).collect();
    let want = logits(&mut one_shot, &prompt);
    // Odd sizes split words, blocks, tensors and the header; unknown lengths end at finish.
    for (chunk, known_len) in [(7, true), (4099, false), (65536, true), ((1 << 20) + 3, false)] {
        let mut engine = load_chunked(backend, &bytes, chunk, known_len, EngineOptions::default()).unwrap();
        assert_eq!(engine.fingerprint, want_fp, "chunk {chunk}: fingerprint");
        assert_eq!(logits(&mut engine, &prompt), want, "chunk {chunk}: logits differ from the one-shot load");
    }
});

#[test]
fn a_header_prefix_asks_for_the_bytes_it_lacks() {
    let bytes = model();
    let whole = GgufHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let cut = 1000;
    match GgufHeader::parse(&bytes[..cut], bytes.len() as u64) {
        Err(GgufError::Truncated { offset, needed, len, .. }) => {
            assert_eq!(len, bytes.len() as u64);
            assert!(offset + needed > cut as u64 && offset + needed <= whole.data_offset, "asks for {offset}+{needed}");
        }
        other => panic!("a 1000-byte prefix parsed as {other:?}"),
    }
    // A forged key length reaching past the whole file is final, not "wait for more".
    let mut forged = bytes.clone();
    forged[24..32].copy_from_slice(&(15u64 << 20).to_le_bytes());
    match GgufHeader::parse(&forged[..cut], forged.len() as u64) {
        Err(GgufError::Truncated { offset, needed, len, .. }) => assert!(offset + needed > len),
        Err(e) => assert!(!matches!(e, GgufError::Truncated { .. }), "{e}"),
        Ok(_) => panic!("forged tensor count accepted"),
    }
}

on_each_backend!(a_truncated_or_overlong_stream_is_a_clear_error, |backend: Backend| {
    let backend = backend.with_webgpu_limits();
    let bytes = model();
    let target = backend.target();
    let poller = Poller::for_target(&target);
    let cut = &bytes[..bytes.len() - 100];
    for known_len in [false, true] {
        let mut loader = ModelLoader::new(target.clone(), EngineOptions::default(), known_len.then_some(bytes.len() as u64));
        loader.push(cut).unwrap();
        let err = poller.block_on(loader.finish()).err().expect("a truncated file must not load").to_string();
        assert!(err.contains("truncated") && err.contains("tensor \"output.weight\""), "{err}");
    }
    let mut loader = ModelLoader::new(target.clone(), EngineOptions::default(), Some(cut.len() as u64));
    let err = loader.push(&bytes).err().expect("more bytes than the stated size").to_string();
    assert!(err.contains("stated size"), "{err}");
    // A file shorter than its header reports the reader's error.
    let mut loader = ModelLoader::new(target.clone(), EngineOptions::default(), None);
    loader.push(&bytes[..500]).unwrap();
    let err = poller.block_on(loader.finish()).err().expect("half a header").to_string();
    assert!(err.contains("truncated while reading"), "{err}");
    let mut loader = ModelLoader::new(target.clone(), EngineOptions::default(), Some(8));
    let err = loader.push(b"GGML\x03\0\0\0").err().expect("bad magic").to_string();
    assert!(err.contains("not a GGUF file"), "{err}");
});

on_each_backend!(steps_are_one_batch_or_one_token_and_abort_keeps_the_cache_sound, |backend: Backend| {
    let backend = backend.with_webgpu_limits();
    let bytes = model();
    let opts = EngineOptions { max_batch: 16, ..Default::default() };
    let mut engine = backend.try_load(&bytes, &opts).unwrap();
    let poller = engine.poller();
    let prompt: Vec<u32> = (0..100).map(|i| (i * 13 % 250) as u32).collect();
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(6) };
    let mut cold_seq = Sequence::default();
    let cold = poller.block_on(engine.generate(&mut cold_seq, &prompt, &params, |_| true)).unwrap();
    engine.release(&mut cold_seq);
    engine.clear_cache();

    // Prefill goes 16 tokens a step; abort after three batches.
    let mut seq = Sequence::default();
    let mut req = engine.start(&mut seq, &prompt, &params).unwrap();
    for k in 1..=3 {
        match poller.block_on(engine.step(&mut req)).unwrap() {
            Step::Prefill { done, total } => assert_eq!((done, total), (16 * k, 100)),
            other => panic!("step {k}: {other:?}"),
        }
    }
    let aborted = engine.abort(&mut req);
    assert_eq!(aborted.finish_reason, FinishReason::Aborted);
    assert_eq!(aborted.stats.prefilled_tokens, 48);
    assert!(matches!(poller.block_on(engine.step(&mut req)), Err(EngineError::RequestOver)));
    engine.release(&mut req.into_sequence());

    // The three batches' pages were kept and are sound: the rerun reuses them and equals cold.
    let mut seq = Sequence::default();
    let mut req = engine.start(&mut seq, &prompt, &params).unwrap();
    let mut tokens = 0;
    let warm = loop {
        match poller.block_on(engine.step(&mut req)).unwrap() {
            Step::Prefill { .. } => {}
            Step::Token { .. } => tokens += 1,
            Step::Done { generation, .. } => break generation,
        }
    };
    engine.release(&mut req.into_sequence());
    assert_eq!(tokens, 6, "one token per decode step");
    assert_eq!(warm.stats.reused_tokens, 48);
    assert_eq!(warm.tokens, cold.tokens, "after an abort, a rerun differs from the cold run");
});

on_each_backend!(a_stateless_conversation_reuses_each_earlier_turn_reply_included, |backend: Backend| {
    let backend = backend.with_webgpu_limits();
    let bytes = model();
    let mut engine = backend.try_load(&bytes, &EngineOptions::default()).unwrap();
    let poller = engine.poller();
    let page = engine.cache_stats().page_size;
    let params = SamplingParams { max_tokens: 20, ignore_eos: true, ..SamplingParams::greedy(20) };
    let mut messages = vec![Message::new("system", "You are a terse assistant who answers in one line.")];
    let mut previous: Option<(usize, usize)> = None;
    for turn in ["What is a lighthouse?", "Who keeps it?", "And at night?"] {
        messages.push(Message::new("user", turn));
        let mut req = engine.start_chat(&mut Sequence::default(), &messages.clone().into(), &params).unwrap();
        let generation = loop {
            match poller.block_on(engine.step(&mut req)).unwrap() {
                Step::Done { generation, .. } => break generation,
                _ => {}
            }
        };
        engine.release(&mut req.into_sequence());
        if let Some((prompt, reply)) = previous {
            assert!(
                generation.stats.reused_tokens + page >= prompt + reply,
                "{turn:?}: reused {} of the previous {prompt} prompt + {reply} reply tokens",
                generation.stats.reused_tokens
            );
        }
        previous = Some((generation.stats.prompt_tokens, generation.tokens.len()));
        messages.push(Message::new("assistant", generation.text));
    }
});

on_each_backend!(the_default_model_streamed_in_network_sized_chunks_equals_the_one_shot_load, |backend: Backend| {
    let backend = backend.with_webgpu_limits();
    let bytes = common::default_model_bytes();
    let mut one_shot = backend.try_load(&bytes, &EngineOptions::default()).unwrap();
    let prompt = one_shot.tokenizer.encode("The capital of France is", true).unwrap();
    let want = logits(&mut one_shot, &prompt);
    drop(one_shot);
    let mut engine = load_chunked(backend, &bytes, 65536 + 17, true, EngineOptions::default()).unwrap();
    assert_eq!(engine.fingerprint, fingerprint(&GgufFile::parse(&bytes).unwrap()));
    assert_eq!(logits(&mut engine, &prompt), want, "logits differ from the one-shot load");
});

on_each_backend!(a_model_without_a_chat_template_refuses_chats_and_completes_prompts, |backend: Backend| {
    let bytes = SyntheticSpec { chat_template: false, ..SyntheticSpec::tiny() }.to_gguf();
    let mut engine = backend.try_load(&bytes, &EngineOptions::default()).unwrap();
    let params = SamplingParams::greedy(8);
    let err = engine.start_chat(&mut Sequence::default(), &vec![Message::new("user", "hi")].into(), &params).err().expect("a chat needs a template");
    assert!(matches!(err, EngineError::NoChatTemplate), "{err:?}");
    assert!(err.to_string().contains("no chat template") && err.to_string().contains("completions"), "{err}");
    let prompt = engine.tokenizer.encode("The lighthouse keeper", true).unwrap();
    assert_eq!(common::run_greedy(&mut engine, &prompt, 8).tokens.len(), 8);
});
