//! A request's result in the shape the engine's surfaces give it (the wasm engine's "done" event,
//! the CLI's `--json`): each choice, the usage and the stats, typed once here; the TypeScript
//! declarations the package reads are generated from these types.

use serde::Serialize;
use tsify::Tsify;

use crate::engine::choices::merged_stats;
use crate::engine::sampling::TokenLogprob;
use crate::engine::{FinishReason, Generation, GenerationStats};
use crate::tokenizer::Tokenizer;

use super::tools::{self, Dialect};

/// Why a reply ended: "tool_calls" where a reply that may call tools did; "abort" where the
/// request was aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    Stop,
    Length,
    ToolCalls,
    ContextFull,
    Abort,
}

impl From<FinishReason> for Finish {
    fn from(f: FinishReason) -> Self {
        match f {
            FinishReason::Stop => Self::Stop,
            FinishReason::Length => Self::Length,
            FinishReason::ContextFull => Self::ContextFull,
            FinishReason::Aborted => Self::Abort,
        }
    }
}

/// A token as OpenAI's log-probability entries name it: its text (bytes that are not UTF-8 on
/// their own shown as U+FFFD) and its bytes; and radixlm's `id`, its id in the vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct TokenEntry {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub id: u32,
}

/// One token's entry of OpenAI's chat `logprobs.content`: the token and the likeliest
/// alternatives, largest first.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct LogprobEntry {
    #[serde(flatten)]
    pub entry: TokenEntry,
    pub top_logprobs: Vec<TokenEntry>,
}

fn token_entry(tokenizer: &Tokenizer, id: u32, logprob: f32) -> TokenEntry {
    let bytes = tokenizer.token_bytes(id).unwrap_or(&[]);
    TokenEntry { token: String::from_utf8_lossy(bytes).into_owned(), logprob, bytes: bytes.to_vec(), id }
}

impl LogprobEntry {
    pub fn new(tokenizer: &Tokenizer, lp: &TokenLogprob) -> Self {
        let top_logprobs = lp.top.iter().map(|&(t, l)| token_entry(tokenizer, t, l)).collect();
        Self { entry: token_entry(tokenizer, lp.token, lp.logprob), top_logprobs }
    }
}

/// A tool call as the reply made it (the caller gives it an id).
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct CallMade {
    pub name: String,
    /// The arguments as JSON text, valid against the function's schema.
    pub arguments: String,
}

/// One choice: its text, finish reason, tokens, top-2 gaps and (when asked) log-probabilities;
/// where the reply may be tool calls and is, `tool_calls` and the finish reason "tool_calls".
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct ChoiceResult {
    pub index: usize,
    pub text: String,
    pub tool_calls: Option<Vec<CallMade>>,
    pub finish_reason: Finish,
    pub tokens: Vec<u32>,
    /// Each token's logit lead over the runner-up (infinite where there was none).
    pub top2_gaps: Vec<f32>,
    pub logprobs: Option<Vec<LogprobEntry>>,
}

impl ChoiceResult {
    /// `calls`: the dialect of the reply's calls where it may make them.
    pub fn new(tokenizer: &Tokenizer, index: usize, g: &Generation, logprobs: bool, calls: Option<Dialect>) -> Self {
        let tool_calls = calls.and_then(|dialect| tools::parse_calls(&g.text, dialect));
        let finish_reason = match (&tool_calls, g.finish_reason) {
            (Some(_), FinishReason::Stop) => Finish::ToolCalls,
            (_, f) => f.into(),
        };
        Self {
            index,
            text: g.text.clone(),
            tool_calls: tool_calls.map(|c| c.into_iter().map(|(name, arguments)| CallMade { name, arguments }).collect()),
            finish_reason,
            tokens: g.tokens.clone(),
            top2_gaps: g.top2_gaps.clone(),
            logprobs: logprobs.then(|| g.logprobs.iter().map(|lp| LogprobEntry::new(tokenizer, lp)).collect()),
        }
    }
}

/// Token counts of a request, the prompt counted once (it was computed once for every choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV was cached and reused.
    pub cached_tokens: usize,
    /// Prompt tokens whose KV came back from the spill store.
    pub restored_tokens: usize,
}

/// A finished request: every choice, the usage and the merged stats. `finish_reason` is
/// "abort" when the request was aborted, else the first choice's (before tool calls).
#[derive(Debug, Clone, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct RequestResult {
    pub finish_reason: Finish,
    pub choices: Vec<ChoiceResult>,
    pub usage: Usage,
    pub stats: GenerationStats,
}

impl RequestResult {
    /// None for a request without choices.
    pub fn new(tokenizer: &Tokenizer, generations: &[Generation], logprobs: bool, calls: Option<Dialect>) -> Option<Self> {
        let first = generations.first()?;
        let aborted = generations.iter().any(|g| g.finish_reason == FinishReason::Aborted);
        Some(Self {
            finish_reason: if aborted { Finish::Abort } else { first.finish_reason.into() },
            choices: generations.iter().enumerate().map(|(i, g)| ChoiceResult::new(tokenizer, i, g, logprobs, calls)).collect(),
            usage: Usage {
                prompt_tokens: first.stats.prompt_tokens,
                completion_tokens: generations.iter().map(|g| g.stats.generated_tokens).sum(),
                cached_tokens: first.stats.reused_tokens,
                restored_tokens: first.stats.restored_tokens,
            },
            stats: merged_stats(generations)?,
        })
    }
}
