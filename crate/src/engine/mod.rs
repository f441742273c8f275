//! The engine: a model loaded onto the GPU, its KV pool, and the generate loop.
//!
//! One request: tokens → keep the part of the sequence's history that matches → prefill the
//! rest at offset = kept length (in batches of up to `max_batch`) → sample the first token
//! (TTFT) → decode until EOS, a stop string, `max_tokens` or the context limit.

pub mod forward;
pub mod sampling;
pub mod weights;

use std::sync::Arc;

use web_time::Instant;

use crate::gguf::{GgufError, GgufFile};
use crate::gpu::context::{Gpu, GpuError};
use crate::kv::pool::{KvPool, DEFAULT_PAGE_SIZE};
use crate::model::{Config, ModelError};
use crate::tokenizer::{ChatTemplate, StreamDecoder, Tokenizer, TokenizerError};

use forward::Forward;
use sampling::{Sampler, SamplingParams};
use weights::ModelWeights;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the prompt is {prompt_tokens} tokens, over the context limit of {limit} tokens")]
    PromptTooLong { prompt_tokens: usize, limit: usize },
    #[error("the KV cache budget holds {capacity_tokens} tokens; this request needs {needed_tokens}. Raise the KV budget or shorten the prompt")]
    KvBudgetExceeded { needed_tokens: usize, capacity_tokens: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the model has no chat template (tokenizer.chat_template)")]
    NoChatTemplate,
}

/// Engine settings chosen by the embedding application.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Bytes of GPU memory for the KV pool, clamped to the adapter's limits.
    pub kv_budget_bytes: u64,
    pub page_size: usize,
    /// Most tokens one forward pass processes; longer prompts are prefilled in batches.
    pub max_batch: usize,
    /// Cap on a sequence's length; defaults to the model's training context.
    pub max_context: Option<usize>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self { kv_budget_bytes: 256 << 20, page_size: DEFAULT_PAGE_SIZE, max_batch: 256, max_context: None }
    }
}

/// A token sequence whose KV lives in pool pages: `pages` cover `tokens` in order.
#[derive(Debug, Default)]
pub struct Sequence {
    tokens: Vec<u32>,
    pages: Vec<u32>,
}

impl Sequence {
    /// Tokens whose keys and values are cached.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The context (or KV budget) is full.
    ContextFull,
    /// The caller's callback asked to stop.
    Aborted,
}

/// Figures for one request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV was already cached and reused.
    pub reused_tokens: usize,
    pub prefilled_tokens: usize,
    pub generated_tokens: usize,
    pub ttft_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
}

#[derive(Debug, Clone)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub text: String,
    pub finish_reason: FinishReason,
    pub stats: GenerationStats,
}

pub struct Engine {
    /// Shared so a native executor can poll the device while a request borrows the engine.
    pub gpu: Arc<Gpu>,
    pub cfg: Config,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<ChatTemplate>,
    pub max_context: usize,
    /// Owned here so the weights live as long as the bind groups that read them.
    _weights: ModelWeights,
    pool: KvPool,
    forward: Forward,
}

impl Engine {
    /// Parses a GGUF model, uploads its weights and builds the forward pass.
    pub fn load(gpu: Arc<Gpu>, gguf: &[u8], opts: &EngineOptions) -> Result<Self, EngineError> {
        let file = GgufFile::parse(gguf)?;
        let cfg = Config::from_gguf(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let chat_template = ChatTemplate::from_gguf(&file)?;
        let weights = ModelWeights::upload(&gpu, &file, &cfg)?;
        let pool = KvPool::new(&gpu, &cfg, opts.page_size, opts.kv_budget_bytes);
        let max_context = opts.max_context.unwrap_or(cfg.n_ctx_train).min(cfg.n_ctx_train).min(pool.capacity_tokens());
        let max_pages = max_context.div_ceil(opts.page_size);
        let forward = Forward::new(&gpu, &cfg, &weights, &pool, opts.max_batch, max_pages)?;
        Ok(Self { gpu, cfg, tokenizer, chat_template, max_context, _weights: weights, pool, forward })
    }

    pub fn kv_capacity_tokens(&self) -> usize {
        self.pool.capacity_tokens()
    }

    /// Tokens of a rendered chat conversation, ending with the assistant's turn opening.
    pub fn chat_tokens(&self, messages: &[crate::tokenizer::Message]) -> Result<Vec<u32>, EngineError> {
        let template = self.chat_template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        let text = template.render(messages, true)?;
        Ok(self.tokenizer.encode(&text, true)?)
    }

    /// Frees a sequence's pages.
    pub fn release(&mut self, seq: &mut Sequence) {
        self.free_pages(&seq.pages);
        seq.pages.clear();
        seq.tokens.clear();
    }

    /// Keeps the longest prefix of `seq` shared with `tokens` (always leaving at least one token
    /// of `tokens` to compute, so logits come from a real forward pass), frees pages past it,
    /// and returns the kept length.
    fn keep_common_prefix(&mut self, seq: &mut Sequence, tokens: &[u32]) -> usize {
        let common = seq.tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let keep = common.min(tokens.len() - 1);
        seq.tokens.truncate(keep);
        let pages = keep.div_ceil(self.pool.page_size);
        self.free_pages(&seq.pages[pages..]);
        seq.pages.truncate(pages);
        keep
    }

    fn free_pages(&mut self, pages: &[u32]) {
        // A sequence owns its pages exclusively, so a failure here is a bookkeeping bug.
        self.pool.alloc.free(pages).expect("sequence pages are allocated and owned once");
    }

    /// Makes `seq`'s pages cover `len` tokens.
    fn reserve(&mut self, seq: &mut Sequence, len: usize) -> Result<(), EngineError> {
        let need = len.div_ceil(self.pool.page_size).saturating_sub(seq.pages.len());
        if need > 0 {
            let pages = self.pool.alloc.alloc(need).ok_or(EngineError::KvBudgetExceeded {
                needed_tokens: len,
                capacity_tokens: seq.pages.len() * self.pool.page_size + self.pool.alloc.n_free() * self.pool.page_size,
            })?;
            seq.pages.extend(pages);
        }
        Ok(())
    }

    /// Computes the KV of `tokens[seq.len()..]` and returns the last token's logits.
    async fn prefill(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let start = seq.tokens.len();
        self.reserve(seq, tokens.len())?;
        let mut logits = None;
        let mut pos = start;
        while pos < tokens.len() {
            let end = (pos + self.forward.max_batch).min(tokens.len());
            let is_last = end == tokens.len();
            logits = self.forward.run(&self.gpu, &tokens[pos..end], pos, &seq.pages, is_last).await?;
            pos = end;
        }
        seq.tokens.extend_from_slice(&tokens[start..]);
        Ok(logits.expect("prefill of at least one token"))
    }

    /// Runs a forward pass over the whole of `tokens` after what `seq` already holds and returns
    /// the logits of the last token. The oracle tests compare these against the CPU reference.
    pub async fn logits(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        self.check_prompt(tokens)?;
        self.keep_common_prefix(seq, tokens);
        self.prefill(seq, tokens).await
    }

    fn check_prompt(&self, tokens: &[u32]) -> Result<(), EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if tokens.len() > self.max_context {
            return Err(EngineError::PromptTooLong { prompt_tokens: tokens.len(), limit: self.max_context });
        }
        Ok(())
    }

    /// Generates a reply to `prompt` (the whole token history of the conversation). What `seq`
    /// already holds of it is reused; the rest is prefilled. `on_text` receives each piece of
    /// text as it is decoded and returns false to stop.
    pub async fn generate(
        &mut self,
        seq: &mut Sequence,
        prompt: &[u32],
        params: &SamplingParams,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generation, EngineError> {
        self.check_prompt(prompt)?;
        let started = Instant::now();
        let reused = self.keep_common_prefix(seq, prompt);
        let mut logits = self.prefill(seq, prompt).await?;
        let prefill_s = started.elapsed().as_secs_f64();

        let mut sampler = Sampler::new(params.clone());
        let mut decoder = StreamDecoder::new();
        let mut stops = StopMatcher::new(&params.stop);
        let mut out = Vec::new();
        let mut ttft = None;
        let decode_started = Instant::now();
        let finish = loop {
            let token = sampler.sample(&logits);
            ttft.get_or_insert_with(|| started.elapsed().as_secs_f64());
            if !params.ignore_eos && self.tokenizer.stop_ids().contains(&token) {
                break FinishReason::Stop;
            }
            out.push(token);
            let piece = decoder.push(&self.tokenizer, token)?;
            let (emit, stopped) = stops.push(&piece);
            if !emit.is_empty() && !on_text(&emit) {
                break FinishReason::Aborted;
            }
            if stopped {
                break FinishReason::Stop;
            }
            if out.len() >= params.max_tokens {
                break FinishReason::Length;
            }
            if seq.tokens.len() + 1 > self.max_context {
                break FinishReason::ContextFull;
            }
            let len = seq.tokens.len() + 1;
            if self.reserve(seq, len).is_err() {
                break FinishReason::ContextFull;
            }
            logits = self.forward.run(&self.gpu, &[token], seq.tokens.len(), &seq.pages, true).await?.expect("logits");
            seq.tokens.push(token);
        };
        // Release what was held back: an unfinished character, or text that only looked like
        // the start of a stop string.
        if !stops.stopped() {
            let (mut rest, stopped) = stops.push(&decoder.finish());
            if !stopped {
                rest.push_str(&stops.flush());
            }
            if !rest.is_empty() {
                on_text(&rest);
            }
        }
        let decode_s = decode_started.elapsed().as_secs_f64();
        let prefilled = prompt.len() - reused;
        let text = stops.text().to_string();
        Ok(Generation {
            stats: GenerationStats {
                prompt_tokens: prompt.len(),
                reused_tokens: reused,
                prefilled_tokens: prefilled,
                generated_tokens: out.len(),
                ttft_ms: ttft.unwrap_or(prefill_s) * 1e3,
                prefill_tokens_per_s: prefilled as f64 / prefill_s.max(1e-9),
                decode_tokens_per_s: out.len().saturating_sub(1) as f64 / decode_s.max(1e-9),
            },
            tokens: out,
            text,
            finish_reason: finish,
        })
    }
}

/// Holds back text that could be the start of a stop string, so a stop string is never
/// streamed to the user, and detects when one completes.
struct StopMatcher<'a> {
    stops: &'a [String],
    text: String,
    emitted: usize,
    stopped: bool,
}

impl<'a> StopMatcher<'a> {
    fn new(stops: &'a [String]) -> Self {
        Self { stops, text: String::new(), emitted: 0, stopped: false }
    }

    /// Appends a piece; returns the text now safe to emit and whether a stop string completed.
    fn push(&mut self, piece: &str) -> (String, bool) {
        self.text.push_str(piece);
        for s in self.stops.iter().filter(|s| !s.is_empty()) {
            if let Some(at) = self.text[self.emitted..].find(s.as_str()) {
                let end = self.emitted + at;
                self.text.truncate(end);
                self.stopped = true;
                return (self.take_until(end), true);
            }
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        let hold = self
            .stops
            .iter()
            .flat_map(|s| (1..s.len()).filter(move |&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
            .filter(|p| self.text[self.emitted..].ends_with(p))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let end = self.text.len() - hold;
        (self.take_until(end), false)
    }

    fn take_until(&mut self, end: usize) -> String {
        let s = self.text[self.emitted..end].to_string();
        self.emitted = end;
        s
    }

    fn flush(&mut self) -> String {
        self.take_until(self.text.len())
    }

    fn stopped(&self) -> bool {
        self.stopped
    }

    fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let stops = vec!["\nUser:".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("Hello"), ("Hello".into(), false));
        assert_eq!(m.push(" there\nUs"), (" there".into(), false));
        assert_eq!(m.push("er: hi"), ("".into(), true));
        assert_eq!(m.text(), "Hello there");
    }

    #[test]
    fn held_text_that_is_not_a_stop_is_released() {
        let stops = vec!["END".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("the E"), ("the ".into(), false));
        assert_eq!(m.push("nd"), ("End".into(), false));
        assert_eq!(m.push(" EN"), (" ".into(), false));
        assert_eq!(m.flush(), "EN");
    }
}
