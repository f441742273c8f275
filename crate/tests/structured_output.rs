//! Structured output on the default model: replies under a response format parse and validate
//! against their JSON Schema (checked by the `jsonschema` crate, not by the engine), greedy and
//! sampled, on both backends; a grammar admitting any text leaves greedy decoding exactly as it
//! was (the control); a format llguidance refuses is an error naming it, before any token.

mod common;

use std::sync::Arc;

use common::{default_model_bytes, Backend};
use radixlm::engine::constraint::ResponseFormat;
use radixlm::engine::sampling::SamplingParams;
use radixlm::engine::{Engine, EngineError, EngineOptions, FinishReason, Poller, Sequence, Target};
use radixlm::gpu::executor::open;
use radixlm::gpu::ops::KernelShapes;
use radixlm::gpu::LimitsPolicy;
use radixlm::tokenizer::Message;
use serde_json::{json, Value};

fn generate(engine: &mut Engine, prompt: &str, params: &SamplingParams) -> Result<radixlm::engine::Generation, EngineError> {
    let tokens = engine.chat_tokens(&vec![Message::new("user", prompt)].into())?;
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let generation = poller.block_on(engine.generate(&mut seq, &tokens, params, |_| true));
    engine.release(&mut seq);
    generation
}

/// The default model on the GPU in the adapter's kernel shapes, with top-k on the device (CPU
/// adapters otherwise sample from logits read back): both pick kernels then take the grammar's
/// mask, whatever shapes the products have.
fn device_picks_engine() -> Engine {
    let gpu = Arc::new(open(LimitsPolicy::Adapter).unwrap());
    let kernels = KernelShapes { gpu_top_k: true, ..KernelShapes::for_adapter(&gpu) };
    let target = Target::Gpu(gpu);
    Poller::for_target(&target).block_on(Engine::load(target, &default_model_bytes(), &EngineOptions { kernels: Some(kernels), ..Default::default() })).unwrap()
}

fn schema_format(schema: &Value) -> ResponseFormat {
    ResponseFormat::from_json(json!({ "type": "json_schema", "json_schema": { "name": "reply", "schema": schema, "strict": true } })).unwrap()
}

/// (prompt, schema), shared with the browser test: nested objects, arrays with bounds, enums,
/// numbers with ranges, anyOf, string patterns, optional fields.
fn cases() -> Vec<(String, Value)> {
    let file: Value = serde_json::from_str(include_str!("fixtures/json_schemas.json")).unwrap();
    file["cases"].as_array().unwrap().iter().map(|c| (c["prompt"].as_str().unwrap().to_string(), c["schema"].clone())).collect()
}

/// Every reply is JSON valid against its schema, at each (temperature, seed).
fn replies_validate(mut engine: Engine, runs: &[(f32, u64)]) {
    for (prompt, schema) in cases() {
        let validator = jsonschema::validator_for(&schema).unwrap();
        for &(temperature, seed) in runs {
            let params = SamplingParams { temperature, seed, max_tokens: 160, response_format: Some(schema_format(&schema)), ..Default::default() };
            let generation = generate(&mut engine, &prompt, &params).unwrap();
            assert_eq!(generation.finish_reason, FinishReason::Stop, "{prompt} at {temperature}/{seed}: the grammar did not end within 160 tokens: {}", generation.text);
            let value: Value = serde_json::from_str(&generation.text).unwrap_or_else(|e| panic!("{prompt} at {temperature}/{seed}: not JSON ({e}): {}", generation.text));
            let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{prompt} at {temperature}/{seed}: {} is invalid: {errors:?}", generation.text);
        }
    }
}

#[test]
fn json_schema_replies_validate_on_the_cpu() {
    replies_validate(Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default()), &[(0.0, 0), (0.9, 1), (0.9, 2)]);
}

#[test]
fn json_schema_replies_validate_on_webgpu() {
    // Sampled, the mask filtering the device's top-k candidates; the masked greedy pick runs in
    // the test below (a step costs half a second on CI's software adapter).
    replies_validate(device_picks_engine(), &[(0.9, 1)]);
}

/// The GPU's pick kernels apply the grammar's mask on the device (greedy's top-2 and top-k):
/// the same tokens as the mask applied to logits read back (a request asking for
/// log-probabilities reads them back), and a mask computed every step.
#[test]
fn the_mask_on_the_device_picks_as_the_mask_on_read_back_logits() {
    let mut engine = device_picks_engine();
    let (prompt, schema) = cases().swap_remove(0);
    let validator = jsonschema::validator_for(&schema).unwrap();
    for (temperature, seed) in [(0.0, 0), (0.9, 3)] {
        let on_device = SamplingParams { temperature, seed, max_tokens: 16, response_format: Some(schema_format(&schema)), ..Default::default() };
        let read_back = SamplingParams { logprobs: Some(1), ..on_device.clone() };
        let got = generate(&mut engine, &prompt, &on_device).unwrap();
        let want = generate(&mut engine, &prompt, &read_back).unwrap();
        assert_eq!(got.tokens, want.tokens, "at {temperature}: {:?} vs {:?}", got.text, want.text);
        assert_eq!(got.stats.mask.as_ref().map(|m| m.steps), want.stats.mask.as_ref().map(|m| m.steps));
        assert!(got.stats.mask.as_ref().is_some_and(|m| m.steps >= got.tokens.len()));
        // Cut at 16 tokens the reply is a prefix of valid JSON; when it ended, it validates.
        if got.finish_reason == FinishReason::Stop {
            let value: Value = serde_json::from_str(&got.text).unwrap();
            assert!(validator.is_valid(&value), "{}", got.text);
        }
    }
}

/// A format seen before starts from a copy of its compiled parser (an app sends the same tools
/// with every request): the copy is the parser as compiled, not one a reply has advanced.
#[test]
fn a_repeated_format_constrains_as_when_first_compiled() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let (prompt, schema) = cases().swap_remove(1);
    let params = SamplingParams { max_tokens: 160, response_format: Some(schema_format(&schema)), ..Default::default() };
    let first = generate(&mut engine, &prompt, &params).unwrap();
    assert_eq!(first.finish_reason, FinishReason::Stop, "{}", first.text);
    for _ in 0..2 {
        let again = generate(&mut engine, &prompt, &params).unwrap();
        assert_eq!(again.tokens, first.tokens, "{:?} vs {:?}", again.text, first.text);
        assert_eq!(again.stats.mask.as_ref().map(|m| m.steps), first.stats.mask.as_ref().map(|m| m.steps));
    }
}

#[test]
fn json_object_replies_are_objects() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let format = ResponseFormat::from_json(json!({ "type": "json_object" })).unwrap();
    let params = SamplingParams { max_tokens: 200, response_format: Some(format), ..Default::default() };
    let generation = generate(&mut engine, "Give a person's name and age as JSON.", &params).unwrap();
    let value: Value = serde_json::from_str(&generation.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", generation.text));
    assert!(value.is_object(), "{value}");
}

#[test]
fn a_grammar_admitting_any_text_leaves_greedy_decoding_as_it_was() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let free = SamplingParams { max_tokens: 48, ..Default::default() };
    let any_text = ResponseFormat::from_json(json!({ "type": "regex", "pattern": "(?s:.*)" })).unwrap();
    let constrained = SamplingParams { response_format: Some(any_text), ..free.clone() };
    for prompt in ["What is the capital of France?", "Write a haiku about the sea."] {
        let want = generate(&mut engine, prompt, &free).unwrap();
        let got = generate(&mut engine, prompt, &constrained).unwrap();
        assert_eq!(got.tokens, want.tokens, "{prompt}: {:?} vs {:?}", got.text, want.text);
        let mask = got.stats.mask.as_ref().expect("a constrained request reports its masks' cost");
        assert_eq!(mask.steps, got.tokens.len() + usize::from(got.finish_reason == FinishReason::Stop));
        assert!(want.stats.mask.is_none());
    }
    // And a regex that admits little is followed exactly.
    let digits = ResponseFormat::from_json(json!({ "type": "regex", "pattern": "[0-9]{3}-[0-9]{4}" })).unwrap();
    let g = generate(&mut engine, "Give me a phone number.", &SamplingParams { max_tokens: 20, response_format: Some(digits), ..Default::default() }).unwrap();
    assert!(g.text.len() == 8 && g.text.chars().enumerate().all(|(i, c)| if i == 3 { c == '-' } else { c.is_ascii_digit() }), "{:?}", g.text);
}

#[test]
fn a_lark_grammar_constrains_the_reply() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let grammar = "start: \"The answer is \" ANSWER \".\"\nANSWER: \"yes\" | \"no\" | \"maybe\"\n";
    let format = ResponseFormat::from_json(json!({ "type": "grammar", "grammar": grammar })).unwrap();
    let g = generate(&mut engine, "Is the sky blue?", &SamplingParams { max_tokens: 20, response_format: Some(format), ..Default::default() }).unwrap();
    assert!(["The answer is yes.", "The answer is no.", "The answer is maybe."].contains(&g.text.as_str()), "{:?}", g.text);
}

#[test]
fn bad_formats_are_errors_that_name_the_problem() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let unknown = ResponseFormat::from_json(json!({ "type": "xml" })).unwrap_err().to_string();
    assert!(unknown.contains("response_format") && unknown.contains("xml"), "{unknown}");
    let extra = ResponseFormat::from_json(json!({ "type": "json_object", "schema": {} })).unwrap_err().to_string();
    assert!(extra.contains("schema"), "{extra}");
    for (format, says) in [
        (json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": { "type": "object", "properties": { "a": { "$ref": "#/nowhere" } } } } }), "nowhere"),
        (json!({ "type": "regex", "pattern": "(unclosed" }), "response_format"),
        (json!({ "type": "grammar", "grammar": "start: undefined_rule\n" }), "undefined_rule"),
    ] {
        let params = SamplingParams { response_format: Some(ResponseFormat::from_json(format.clone()).unwrap()), ..Default::default() };
        let err = generate(&mut engine, "Hi", &params).unwrap_err().to_string();
        assert!(err.contains(says), "{format}: {err}");
    }
    // Nothing was computed or cached by the refused requests.
    assert_eq!(engine.cache_stats().cached_pages, 0);
}
