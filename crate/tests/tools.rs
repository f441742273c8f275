//! Tool calling on the default model, through the request fields the package sends: calls whose
//! arguments validate against their function's schema (checked by the `jsonschema` crate), a
//! round trip whose second request reuses the first's pages, `tool_choice` and
//! `parallel_tool_calls` as OpenAI defines them, and malformed tools refused by name.

mod common;

use common::{default_model_bytes, Backend};
use radixlm::api::{self, Dialect, RequestFields};
use radixlm::engine::{Engine, EngineOptions, Sequence};
use radixlm::tokenizer::{ChatTemplate, Conversation, Message};
use serde_json::{json, Value};

fn tools() -> Value {
    json!([
        { "type": "function", "function": {
            "name": "convert_units",
            "description": "Convert a quantity from one unit to another.",
            "parameters": { "type": "object", "properties": {
                "value": { "type": "number" },
                "from_unit": { "type": "string", "enum": ["km", "mi", "kg", "lb", "C", "F"] },
                "to_unit": { "type": "string", "enum": ["km", "mi", "kg", "lb", "C", "F"] } },
                "required": ["value", "from_unit", "to_unit"] } } },
        { "type": "function", "function": {
            "name": "get_time",
            "description": "The current time in a city.",
            "parameters": { "type": "object", "properties": { "city": { "type": "string", "minLength": 1 } }, "required": ["city"] } } },
    ])
}

/// A chat request run as the wasm engine runs one; its OpenAI-shaped result.
fn chat(engine: &mut Engine, request: Value) -> Value {
    let fields: RequestFields = serde_json::from_value(request).unwrap();
    let (chat, calls) = fields.conversation(engine.tool_dialect()).unwrap();
    let sampling = fields.sampling(engine.cfg.vocab_size, engine.tool_dialect(), || 0).unwrap();
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let mut req = engine.start_chat(&mut seq, &chat, &sampling.params).unwrap();
    let generation = poller.block_on(engine.run_to_end(&mut req, |_| true)).unwrap();
    engine.release(&mut req.into_sequence());
    serde_json::to_value(api::RequestResult::new(&engine.tokenizer, &[generation], false, calls).unwrap()).unwrap()
}

fn refused(request: Value) -> String {
    let fields: RequestFields = match serde_json::from_value(request) {
        Ok(f) => f,
        Err(e) => return e.to_string(),
    };
    fields.conversation(Dialect::Generic).and_then(|_| fields.sampling(49152, Dialect::Generic, || 0).map(drop)).expect_err("refused")
}

/// Each call names a tool and its arguments validate against that tool's schema.
fn valid_calls(choice: &Value) -> Vec<(String, Value)> {
    let tools = tools();
    let calls = choice["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool calls: {choice}"));
    calls
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap().to_string();
            let tool = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == name.as_str()).unwrap();
            let args: Value = serde_json::from_str(c["arguments"].as_str().unwrap()).unwrap();
            let validator = jsonschema::validator_for(&tool["function"]["parameters"]).unwrap();
            let errors: Vec<String> = validator.iter_errors(&args).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{name}({args}): {errors:?}");
            (name, args)
        })
        .collect()
}

/// The conversation an app sends back: the question, the reply's calls (with ids), and each
/// call's result (`{"name": result}`).
fn with_results(user: &Value, choice: &Value, calls: &[(String, Value)], result: &str) -> Vec<Value> {
    let tool_calls: Vec<Value> = choice["tool_calls"].as_array().unwrap().iter().enumerate().map(|(i, c)| json!({ "id": format!("call_{i}"), "type": "function", "function": c })).collect();
    let mut messages = vec![user.clone(), json!({ "role": "assistant", "content": null, "tool_calls": tool_calls })];
    for (i, (name, _)) in calls.iter().enumerate() {
        messages.push(json!({ "role": "tool", "tool_call_id": format!("call_{i}"), "content": json!({ name.as_str(): result }).to_string() }));
    }
    messages
}

#[test]
fn a_tool_round_trip_reuses_the_first_requests_pages() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let user = json!({ "role": "user", "content": "How many miles is 42 km?" });
    let first = chat(&mut engine, json!({ "messages": [user], "tools": tools(), "tool_choice": "required", "temperature": 0, "max_tokens": 96 }));
    let choice = &first["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{first}");
    let calls = valid_calls(choice);
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();

    // The app runs the tool and sends the conversation back with the call and its result.
    let messages = with_results(&user, choice, &calls, "26.1 mi");
    // "none" asks for the answer in text (under "auto" this 135M model calls again).
    let second = chat(&mut engine, json!({ "messages": messages, "tools": tools(), "tool_choice": "none", "temperature": 0, "max_tokens": 48 }));
    let cached = second["usage"]["cached_tokens"].as_u64().unwrap();
    // The first prompt and the call as generated are the second prompt's start: all of it but
    // the tokens after the last whole page is reused.
    let page = engine.cache_stats().page_size as u64;
    let generated = first["choices"][0]["tokens"].as_array().unwrap().len() as u64;
    assert!(cached + page > prompt_tokens + generated, "cached {cached} of a first prompt of {prompt_tokens} and {generated} generated: {second}");
    let answer = &second["choices"][0];
    assert!(answer["tool_calls"].is_null() && !answer["text"].as_str().unwrap().is_empty(), "answered in text: {second}");
}

/// The default model under one of llama.cpp's collected templates (a template that presents
/// tools itself), in `dialect`.
fn under_template(name: &str, eos: &str, dialect: Dialect) -> Engine {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    assert_eq!(engine.tool_dialect(), Dialect::Generic, "SmolLM2's template has no tools");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/vocab/templates").join(name);
    let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_vocabs.sh)", path.display()));
    engine.chat_template = Some(ChatTemplate::new(&source, String::new(), eos.into()).unwrap());
    assert_eq!(engine.tool_dialect(), dialect, "{name}");
    engine
}

/// A template that presents tools itself gets them as OpenAI's objects and the reply's calls
/// are in its own layout: the default model run under it calls (`opens` the reply), the calls
/// parse and validate, the template wrote the tools (`presented` is in its prompt), and the
/// conversation sent back (the calls and results rendered by the template) reuses the first
/// prompt's pages. Returns the calls.
fn round_trip_in_the_templates_own_format(engine: &mut Engine, opens: &str, presented: &str) -> Vec<(String, Value)> {
    let user = json!({ "role": "user", "content": "Convert 10 km to miles, and tell me the time in Lima." });
    let first = chat(engine, json!({ "messages": [user], "tools": tools(), "tool_choice": "required", "temperature": 0, "max_tokens": 128 }));
    let choice = &first["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{first}");
    assert!(choice["text"].as_str().unwrap().starts_with(opens), "{first}");
    let calls = valid_calls(choice);
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let rendered = engine.render_chat(&Conversation { messages: vec![Message::new("user", user["content"].as_str().unwrap())], tools: tools().as_array().unwrap().clone() }, true).unwrap();
    assert!(rendered.contains(presented), "{rendered}");
    assert_eq!(engine.tokenizer.encode(&rendered, true).unwrap().len() as u64, prompt_tokens);

    let messages = with_results(&user, choice, &calls, "done");
    let second = chat(engine, json!({ "messages": messages, "tools": tools(), "tool_choice": "none", "temperature": 0, "max_tokens": 24 }));
    let cached = second["usage"]["cached_tokens"].as_u64().unwrap();
    let page = engine.cache_stats().page_size as u64;
    assert!(cached + page > prompt_tokens, "cached {cached} of a first prompt of {prompt_tokens}: {second}");
    let answer = &second["choices"][0];
    assert!(answer["tool_calls"].is_null() && !answer["text"].as_str().unwrap().is_empty(), "answered in text: {second}");
    calls
}

/// Qwen3's template (Hermes): `<tool_call>` blocks, the tools as its own tojson writes them.
#[test]
fn a_hermes_template_presents_the_tools_and_reads_its_calls() {
    let mut engine = under_template("Qwen-Qwen3-0.6B.jinja", "<|im_end|>", Dialect::Hermes);
    round_trip_in_the_templates_own_format(&mut engine, "<tool_call>\n{", "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"convert_units\"");
}

/// Llama 3.2's template: the tools indented in the first user message, a call is the reply's
/// one `{"name": …, "parameters": …}` object (one call, though two were asked for), results come
/// back as `ipython` turns, and calls sent back two at a time are the template's own refusal.
#[test]
fn a_llama3_template_presents_the_tools_and_reads_its_one_call() {
    let mut engine = under_template("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|eot_id|>", Dialect::Llama3);
    let calls = round_trip_in_the_templates_own_format(&mut engine, "{\"name\": \"", "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions");
    assert_eq!(calls.len(), 1);
    let (name, arguments) = &calls[0];
    let call = |id: &str| json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments.to_string() } });
    let two = json!({ "messages": [{ "role": "user", "content": "Twice?" }, { "role": "assistant", "content": null, "tool_calls": [call("a"), call("b")] }], "tools": tools(), "tool_choice": "none" });
    let fields: RequestFields = serde_json::from_value(two).unwrap();
    let (conversation, _) = fields.conversation(Dialect::Llama3).unwrap();
    let refused = engine.render_chat(&conversation, true).expect_err("two calls at once");
    assert!(refused.to_string().contains("only supports single tool-calls"), "{refused}");
}

#[test]
fn tool_choice_and_parallel_calls_shape_the_reply() {
    let mut engine = Backend::Cpu.load(&default_model_bytes(), &EngineOptions::default());
    let ask = |content: &str| json!([{ "role": "user", "content": content }]);
    // A named function: one call of it, whatever the question.
    let named = chat(&mut engine, json!({ "messages": ask("What time is it in Paris?"), "tools": tools(), "tool_choice": { "type": "function", "function": { "name": "convert_units" } }, "temperature": 0, "max_tokens": 96 }));
    let calls = valid_calls(&named["choices"][0]);
    assert_eq!(calls.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["convert_units"], "{named}");
    // One call at most without parallel calls, sampled too.
    for seed in 0..3 {
        let one = chat(&mut engine, json!({ "messages": ask("Convert 10 kg to lb and tell me the time in Tokyo."), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "temperature": 0.9, "seed": seed, "max_tokens": 96 }));
        assert_eq!(valid_calls(&one["choices"][0]).len(), 1, "{one}");
    }
    // "none": text, never a call.
    let none = chat(&mut engine, json!({ "messages": ask("How many miles is 42 km?"), "tools": tools(), "tool_choice": "none", "temperature": 0, "max_tokens": 32 }));
    assert!(none["choices"][0]["tool_calls"].is_null(), "{none}");
    assert!(!none["choices"][0]["text"].as_str().unwrap().starts_with("<tool_call>"), "{none}");
}

#[test]
fn malformed_tools_and_tool_messages_are_refused_by_name() {
    let user = json!([{ "role": "user", "content": "Hi" }]);
    let tool = |f: Value| json!([{ "type": "function", "function": f }]);
    for (request, says) in [
        (json!({ "messages": user, "tools": tool(json!({ "name": "bad name" })) }), "tools[0].function.name must be 1-64 letters"),
        (json!({ "messages": user, "tools": [tools()[0], tools()[0]] }), "is given twice"),
        (json!({ "messages": user, "tools": tool(json!({ "name": "f", "parameters": [] })) }), "parameters must be a JSON Schema object"),
        (json!({ "messages": user, "tools": tool(json!({ "name": "f", "returns": {} })) }), "unknown field `returns`"),
        (json!({ "messages": user, "tools": [{ "type": "retrieval", "function": { "name": "f" } }] }), "tools[0].type must be \"function\""),
        (json!({ "messages": user, "tools": tools(), "tool_choice": { "type": "function", "function": { "name": "nope" } } }), "\"nope\", which is not among the tools"),
        (json!({ "messages": user, "tools": tools(), "tool_choice": "sometimes" }), "tool_choice must be"),
        (json!({ "messages": user, "tool_choice": "required" }), "tool_choice needs tools"),
        (json!({ "messages": user, "tools": tools(), "response_format": { "type": "json_object" } }), "tool_choice: \"none\""),
        (json!({ "messages": [{ "role": "tool", "content": "1" }] }), "needs the tool_call_id"),
        (json!({ "messages": [{ "role": "assistant", "content": null, "tool_calls": [{ "id": "a", "type": "function", "function": { "name": "f", "arguments": "[1]" } }] }] }), "tool_calls[0] must be"),
        (json!({ "messages": [{ "role": "critic", "content": "x" }] }), "role must be"),
        (json!({ "prompt": "x", "tools": tools() }), "tools need a chat request"),
    ] {
        let e = if request.get("prompt").is_some() {
            let fields: RequestFields = serde_json::from_value(request.clone()).unwrap();
            fields.completion_prompt().map(drop).expect_err("refused")
        } else {
            refused(request.clone())
        };
        assert!(e.contains(says), "{request}: {e}");
    }
}
