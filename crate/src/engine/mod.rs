//! The engine: a model loaded onto the GPU, its KV pool, and the generate loop.
//!
//! One request: tokens → keep the part of the sequence's history that matches → prefill the
//! rest at offset = kept length (in batches of up to `max_batch`) → sample the first token
//! (TTFT) → decode until EOS, a stop string, `max_tokens` or the context limit.

pub mod forward;
pub mod sampling;
pub mod session;
mod stop;
pub mod weights;

use std::sync::Arc;

use web_time::Instant;

use crate::gguf::{GgufError, GgufFile};
use crate::gpu::context::{Gpu, GpuError};
use crate::kv::pool::{KvPool, DEFAULT_PAGE_SIZE};
use crate::kv::{CacheError, CacheStats, PrefixCache};
use crate::model::fingerprint::fingerprint;
use crate::model::{Config, ModelError};
use crate::tokenizer::{ChatTemplate, StreamDecoder, Tokenizer, TokenizerError};

use forward::Forward;
use sampling::{Sampler, SamplingParams};
use stop::StopMatcher;
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
    #[error(transparent)]
    Cache(#[from] CacheError),
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

pub use crate::kv::Sequence;

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
    /// Every token sampled, up to (not including) an end-of-sequence token.
    pub tokens: Vec<u32>,
    /// The decoded reply, cut before a stop string if one appeared.
    pub text: String,
    pub finish_reason: FinishReason,
    /// A stop string ended the reply (so `text` may end inside `tokens`).
    pub hit_stop_string: bool,
    pub stats: GenerationStats,
}

pub struct Engine {
    /// Shared so a native executor can poll the device while a request borrows the engine.
    pub gpu: Arc<Gpu>,
    pub cfg: Config,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<ChatTemplate>,
    pub max_context: usize,
    /// Identifies the model's weights, metadata and tokenizer; seeds the cache's page hashes.
    pub fingerprint: u128,
    cache: PrefixCache,
    /// Owned here so the weights live as long as the bind groups that read them.
    _weights: ModelWeights,
    /// The KV pages the forward pass's bind groups read and write.
    _pool: KvPool,
    forward: Forward,
}

impl Engine {
    /// Parses a GGUF model, uploads its weights and builds the forward pass.
    pub fn load(gpu: Arc<Gpu>, gguf: &[u8], opts: &EngineOptions) -> Result<Self, EngineError> {
        let file = GgufFile::parse(gguf)?;
        let cfg = Config::from_gguf(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let chat_template = ChatTemplate::from_gguf(&file)?;
        let fingerprint = fingerprint(&file);
        let weights = ModelWeights::upload(&gpu, &file, &cfg)?;
        let pool = KvPool::new(&gpu, &cfg, opts.page_size, opts.kv_budget_bytes);
        let cache = PrefixCache::new(pool.n_pages as u32, opts.page_size, fingerprint);
        let max_context = opts.max_context.unwrap_or(cfg.n_ctx_train).min(cfg.n_ctx_train).min(cache.capacity_tokens());
        let max_pages = max_context.div_ceil(opts.page_size);
        let forward = Forward::new(&gpu, &cfg, &weights, &pool, opts.max_batch, max_pages)?;
        Ok(Self { gpu, cfg, tokenizer, chat_template, max_context, fingerprint, cache, _weights: weights, _pool: pool, forward })
    }

    pub fn kv_capacity_tokens(&self) -> usize {
        self.cache.capacity_tokens()
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Evicts every cached prefix that no live sequence holds (pinned ones too).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
    }

    /// Computes (if not cached) and pins `tokens`' whole pages so eviction never takes them:
    /// for system prompts and tool schemas every request starts with. Returns the pinned length.
    pub async fn pin(&mut self, tokens: &[u32]) -> Result<usize, EngineError> {
        let mut seq = Sequence::default();
        let result = self.logits(&mut seq, tokens).await;
        self.cache.release(&mut seq);
        result?;
        Ok(self.cache.pin(tokens))
    }

    /// Undoes one `pin` of the same tokens; false if they were not pinned.
    pub fn unpin(&mut self, tokens: &[u32]) -> bool {
        self.cache.unpin(tokens)
    }

    /// Tokens of a rendered chat conversation, ending with the assistant's turn opening.
    pub fn chat_tokens(&self, messages: &[crate::tokenizer::Message]) -> Result<Vec<u32>, EngineError> {
        let template = self.chat_template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        let text = template.render(messages, true)?;
        Ok(self.tokenizer.encode(&text, true)?)
    }

    /// Ends a sequence: its full pages stay cached for later requests, the rest is freed.
    pub fn release(&mut self, seq: &mut Sequence) {
        self.cache.release(seq);
    }

    /// Computes the KV of `tokens[seq.len()..]` and returns the last token's logits.
    async fn prefill(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let start = seq.len();
        self.cache.reserve(seq, tokens.len())?;
        let mut logits = None;
        let mut pos = start;
        while pos < tokens.len() {
            let end = (pos + self.forward.max_batch).min(tokens.len());
            let is_last = end == tokens.len();
            logits = self.forward.run(&self.gpu, &tokens[pos..end], pos, seq.pages(), is_last).await?;
            pos = end;
        }
        seq.extend(&tokens[start..]);
        Ok(logits.expect("prefill of at least one token"))
    }

    /// Runs a forward pass over the whole of `tokens` after what `seq` already holds and returns
    /// the logits of the last token. The oracle tests compare these against the CPU reference.
    pub async fn logits(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        self.check_prompt(tokens)?;
        self.cache.adopt(seq, tokens);
        let logits = self.prefill(seq, tokens).await;
        self.cache.commit(seq);
        logits
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
        let reused = self.cache.adopt(seq, prompt);
        let prefilled = self.prefill(seq, prompt).await;
        let mut logits = match prefilled {
            Ok(l) => l,
            Err(e) => {
                self.cache.commit(seq);
                return Err(e);
            }
        };
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
            if seq.len() + 1 > self.max_context || self.cache.reserve(seq, seq.len() + 1).is_err() {
                break FinishReason::ContextFull;
            }
            match self.forward.run(&self.gpu, &[token], seq.len(), seq.pages(), true).await {
                Ok(l) => logits = l.expect("logits requested"),
                Err(e) => {
                    self.cache.commit(seq);
                    return Err(e);
                }
            }
            seq.extend(&[token]);
        };
        // The prompt's and the reply's full pages become reusable by later requests.
        self.cache.commit(seq);
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
            hit_stop_string: stops.stopped(),
        })
    }
}

