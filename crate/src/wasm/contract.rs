//! The values that cross the wasm boundary beyond the request and result types of `crate::api`:
//! the loader's options, a prefix to pin, a step's event, the model's info and the engine's
//! stats. They cross as JS values through serde-wasm-bindgen; their TypeScript declarations are
//! generated from these types (tsify) into the glue's `.d.ts`, which the package compiles
//! against.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tsify::Tsify;
use wasm_bindgen::JsValue;

use crate::api::tools::{ChatMessage, Tool};
use crate::api::{null_as_default, LogprobEntry, RequestResult};
use crate::engine::spill::SpillStats;
use crate::kv::cache::CacheStats;

use super::{invalid, named_error};

/// Options of `WasmLoader.create`.
#[derive(Deserialize, Default, Tsify)]
#[tsify(missing_as_null)]
#[serde(default, deny_unknown_fields)]
pub struct LoadOptions {
    pub kv_budget_bytes: Option<f64>,
    pub max_batch: Option<usize>,
    pub max_context: Option<usize>,
    /// "q8" (the default), "q4" or "off".
    #[tsify(type = "\"q8\" | \"q4\" | \"off\"")]
    pub spill: Option<String>,
    pub spill_budget_bytes: Option<f64>,
    /// "webgpu" (the default) or "cpu"; the package's worker resolves "auto" first, since only
    /// it sees whether the adapter is a software one.
    #[tsify(type = "\"webgpu\" | \"cpu\"")]
    pub backend: Option<String>,
    /// The CPU backend's threads (1 by default); more than one needs the threaded build and a
    /// `spawn_thread` function.
    pub threads: Option<usize>,
}

/// A prefix to pin: text, or a conversation and its tools (rendered without opening the
/// assistant's turn).
#[derive(Deserialize, Tsify)]
#[serde(untagged, deny_unknown_fields)]
pub enum Prefix {
    Text {
        text: String,
    },
    Conversation {
        #[serde(default, deserialize_with = "null_as_default")]
        tools: Vec<Tool>,
        #[serde(default, deserialize_with = "null_as_default")]
        messages: Vec<ChatMessage>,
    },
}

/// What one `WasmEngine.step()` did. A token's text is "" while it is held back (partial UTF-8,
/// maybe a stop string); `index` is its choice. "choice_done": a choice ended, the next follows;
/// "done": the request ended.
#[derive(Serialize, Tsify)]
#[serde(tag = "type", rename_all = "snake_case")]
#[tsify(missing_as_null)]
pub enum StepEvent {
    Prefill {
        done: usize,
        total: usize,
    },
    Token {
        index: usize,
        /// null for a choice's held-back text given at its end.
        token: Option<u32>,
        text: String,
        logprob: Option<LogprobEntry>,
    },
    ChoiceDone {
        index: usize,
    },
    Done(RequestResult),
}

/// `WasmEngine.info()`.
#[derive(Serialize, Tsify)]
pub struct ModelInfo {
    pub model_name: String,
    pub architecture: String,
    pub n_layers: usize,
    pub n_embd: usize,
    pub vocab_size: usize,
    /// The context the model was trained for.
    pub n_ctx: usize,
    /// The longest sequence this engine serves.
    pub max_context: usize,
    pub page_size: usize,
    /// The adapter's name, or the CPU kernels' instruction set.
    pub adapter: String,
    #[tsify(type = "\"webgpu\" | \"cpu\"")]
    pub backend: String,
    pub threads: usize,
    /// The model's fingerprint (hex), which keys its cache.
    pub fingerprint: String,
    pub has_chat_template: bool,
    /// How the model is shown tools and writes its calls (`api::Dialect`).
    #[tsify(type = "\"generic\" | \"hermes\" | \"llama3\"")]
    pub tool_format: String,
    /// What a reply of tool calls starts with in that format (a text reply may not).
    pub tool_call_opener: String,
}

/// `WasmEngine.stats()`: the cache's occupancy, its use, and the spill tier (null when off,
/// with `spill_note` saying why when it was asked for).
#[derive(Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct EngineStats {
    #[serde(flatten)]
    pub cache: CacheStats,
    pub requests: u64,
    pub tokens_reused: u64,
    pub spill: Option<SpillStats>,
    pub spill_note: Option<String>,
}

/// A JS value read as `T`; an error names the field at fault. Read through a JSON value first,
/// since serde-wasm-bindgen reads only a struct's known fields and so cannot refuse unknown ones.
pub fn from_js<T: DeserializeOwned>(value: JsValue, what: &str) -> Result<T, JsValue> {
    let json: serde_json::Value = serde_wasm_bindgen::from_value(value).map_err(|e| invalid(format!("{what}: {e}")))?;
    serde_path_to_error::deserialize(json).map_err(|e| match e.path().to_string().as_str() {
        "." => invalid(format!("{what}: {}", e.inner())),
        path => invalid(format!("{what}: {path}: {}", e.inner())),
    })
}

/// `value` as a plain JS value: objects, not Maps; null, not undefined, for a missing value (as
/// the generated declarations say).
pub fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsValue> {
    value.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).map_err(|e| named_error("InternalError", &e.to_string()))
}
