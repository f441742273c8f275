//! OpenAI's request and response shapes as the engine's surfaces take and give them (the wasm
//! engine the package drives, the CLI's `--json`): the request's fields checked into
//! [`SamplingParams`] in one place, and (`response`) the response's choices, tool calls,
//! log-probabilities and usage. `tools` renders and parses tool calls. These types are the
//! contract: the package's TypeScript declarations of them are generated (tsify).

pub mod response;
pub mod tools;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use tsify::Tsify;

use crate::engine::constraint::ResponseFormat;
use crate::engine::sampling::{Penalties, SamplingParams};
use crate::tokenizer::Conversation;
pub use response::{ChoiceResult, Finish, LogprobEntry, RequestResult, Usage};
pub use tools::Dialect;
use tools::{ChatMessage, Tool, ToolChoice};

/// Replies are cut here when a request sets no `max_tokens`.
pub const DEFAULT_MAX_TOKENS: usize = 1024;
/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 16;
/// Most alternatives per token (`top_logprobs`), as OpenAI's API allows.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A chat (`messages`) or text completion (`prompt`) request: OpenAI's fields with radixlm's
/// extras (`top_k`, `ignore_eos`, `repetition_penalty`, `penalty_last_n`, the `grammar` and
/// `regex` response formats). A field it does not know is an error, never ignored. Its checks
/// are [`RequestFields::sampling`]'s, the one place they are made.
#[derive(Deserialize, Default, Debug, Tsify)]
#[tsify(missing_as_null)]
#[serde(default, deny_unknown_fields)]
pub struct RequestFields {
    /// A chat request's conversation.
    pub messages: Option<Vec<ChatMessage>>,
    /// A text completion request's prompt.
    pub prompt: Option<String>,
    pub tools: Option<Vec<Tool>>,
    /// "auto" (with tools), "none", "required", or one function by name.
    #[tsify(type = "\"auto\" | \"none\" | \"required\" | { type: \"function\"; function: { name: string } } | null")]
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<usize>,
    /// OpenAI's newer name for `max_tokens`.
    pub max_completion_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub seed: Option<u64>,
    #[serde(deserialize_with = "null_as_default")]
    pub stop: Vec<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub ignore_eos: bool,
    #[tsify(type = "ResponseFormat | null")]
    pub response_format: Option<Value>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub penalty_last_n: Option<usize>,
    /// Token ids (as strings, OpenAI's JSON keys) to the bias added to their logits.
    #[tsify(type = "Record<string, number> | null")]
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Chat: `true` with `top_logprobs` alternatives; text completion: the number of alternatives.
    pub logprobs: Option<Logprobs>,
    pub top_logprobs: Option<usize>,
    pub n: Option<usize>,
}

/// An explicit `null` read as the field's default, as for an absent field (OpenAI's API takes
/// both for an unset field).
pub fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Debug, Clone, Copy, Tsify)]
#[serde(untagged)]
pub enum Logprobs {
    On(bool),
    Top(usize),
}

/// A request's sampling as the engine takes it, and how many choices.
#[derive(Debug, Clone)]
pub struct Sampling {
    pub params: SamplingParams,
    pub n: usize,
}

fn range(field: &str, value: Option<f32>, lo: f32, hi: f32, default: f32) -> Result<f32, String> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && (lo..=hi).contains(&v) => Ok(v),
        Some(v) => Err(format!("{field} must be a number in [{lo}, {hi}], got {v}")),
    }
}

impl RequestFields {
    fn tools(&self) -> &[Tool] {
        self.tools.as_deref().unwrap_or_default()
    }

    /// What `tool_choice` allows, the tools checked.
    fn tool_choice(&self) -> Result<ToolChoice, String> {
        tools::check_tools(self.tools())?;
        ToolChoice::from_json(self.tool_choice.as_ref(), self.tools())
    }

    /// A chat request's conversation as the chat template takes it in `dialect`, and the dialect
    /// again where its replies may be tool calls.
    pub fn conversation(&self, dialect: Dialect) -> Result<(Conversation, Option<Dialect>), String> {
        let messages = match (&self.messages, &self.prompt) {
            (Some(m), None) if !m.is_empty() => m,
            (_, Some(_)) => return Err("a chat request takes messages, not a prompt".into()),
            _ => return Err("messages must hold at least one message".into()),
        };
        if let Some(Logprobs::Top(_)) = self.logprobs {
            return Err("a chat request's logprobs is true or false (top_logprobs gives the alternatives)".into());
        }
        let calls = (self.tool_choice()? != ToolChoice::None).then_some(dialect);
        Ok((tools::template_messages(self.tools(), messages, dialect)?, calls))
    }

    /// A text completion request's prompt.
    pub fn completion_prompt(&self) -> Result<&str, String> {
        if self.tools.is_some() || self.tool_choice.is_some() || self.parallel_tool_calls.is_some() {
            return Err("tools need a chat request (messages)".into());
        }
        if let Some(Logprobs::On(_)) = self.logprobs {
            return Err("a completion request's logprobs is a number of alternatives, not true or false".into());
        }
        match (&self.prompt, &self.messages) {
            (Some(prompt), None) => Ok(prompt),
            _ => Err("a completion request takes a prompt (a string), not messages".into()),
        }
    }

    /// The sampling parameters, checked against a vocabulary of `vocab_size` tokens, tool calls
    /// in `dialect`; `seed` is used when the request sets none.
    pub fn sampling(&self, vocab_size: usize, dialect: Dialect, seed: impl FnOnce() -> u64) -> Result<Sampling, String> {
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(format!("temperature must be a number >= 0, got {temperature}"));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {top_p}"));
        }
        let max_tokens = match (self.max_tokens, self.max_completion_tokens) {
            (Some(a), Some(b)) if a != b => return Err(format!("max_tokens ({a}) and max_completion_tokens ({b}) disagree: set one")),
            (a, b) => a.or(b).unwrap_or(DEFAULT_MAX_TOKENS),
        };
        if max_tokens == 0 {
            return Err("max_tokens must be at least 1".into());
        }
        if self.stop.iter().any(String::is_empty) {
            return Err("stop strings must not be empty".into());
        }
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&n) {
            return Err(format!("n must be between 1 and {MAX_CHOICES}, got {n}"));
        }
        let logprobs = match (self.logprobs, self.top_logprobs) {
            (None | Some(Logprobs::On(false)), Some(_)) => return Err("top_logprobs needs logprobs: true".into()),
            (None | Some(Logprobs::On(false)), None) => None,
            (Some(Logprobs::On(true)), top) => Some(top.unwrap_or(0)),
            (Some(Logprobs::Top(top)), _) => Some(top),
        };
        if let Some(top) = logprobs.filter(|&t| t > MAX_TOP_LOGPROBS) {
            return Err(format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {top}"));
        }
        let penalties = Penalties {
            repetition: match self.repetition_penalty {
                Some(r) if !(r.is_finite() && r > 0.0) => return Err(format!("repetition_penalty must be a number > 0, got {r}")),
                r => r.unwrap_or(1.0),
            },
            frequency: range("frequency_penalty", self.frequency_penalty, -2.0, 2.0, 0.0)?,
            presence: range("presence_penalty", self.presence_penalty, -2.0, 2.0, 0.0)?,
            last_n: self.penalty_last_n.unwrap_or(Penalties::default().last_n),
        };
        let mut logit_bias = Vec::new();
        for (key, &bias) in self.logit_bias.iter().flatten() {
            let token = key.parse::<u32>().ok().filter(|&t| (t as usize) < vocab_size);
            let token = token.ok_or_else(|| format!("logit_bias keys must be token ids below the vocabulary's {vocab_size}, got {key:?}"))?;
            logit_bias.push((token, range("logit_bias values", Some(bias), -100.0, 100.0, 0.0)?));
        }
        let choice = self.tool_choice()?;
        let response_format = match (self.response_format.clone(), &choice) {
            (Some(_), ToolChoice::Auto | ToolChoice::Required | ToolChoice::Function(_)) => {
                return Err("response_format constrains a text reply: with tools it needs tool_choice: \"none\"".into())
            }
            (Some(format), _) => Some(ResponseFormat::from_json(format).map_err(|e| e.to_string())?),
            (None, _) => tools::reply_format(self.tools(), &choice, self.parallel_tool_calls.unwrap_or(true), dialect),
        };
        let params = SamplingParams {
            temperature,
            top_k: self.top_k.unwrap_or(0),
            top_p,
            seed: self.seed.unwrap_or_else(seed),
            max_tokens,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            response_format,
            penalties,
            logit_bias,
            logprobs,
        };
        Ok(Sampling { params, n })
    }
}
