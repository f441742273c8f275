//! The engine: a model loaded onto the GPU, its KV pool, and the generate loop.
//!
//! One request: tokens → keep the part of the sequence's history that matches → prefill the
//! rest at offset = kept length (in batches of up to `max_batch`) → sample the first token
//! (TTFT) → decode until EOS, a stop string, `max_tokens` or the context limit.

pub mod forward;
pub mod histories;
pub mod loader;
pub mod request;
pub mod sampling;
pub mod session;
pub mod spill;
mod stop;
pub mod weights;

use std::sync::Arc;

use crate::gguf::GgufError;
use crate::gpu::context::{Gpu, GpuError};
use crate::kv::pool::{KvPool, DEFAULT_PAGE_SIZE};
use crate::kv::spill::{SpillFormat, SpillStore};
use crate::kv::{CacheError, CacheStats, PrefixCache};
use crate::model::{Config, ModelError};
use crate::tokenizer::{ChatTemplate, Tokenizer, TokenizerError};

use forward::Forward;
use spill::{SpillStats, SpillTier};
pub use loader::ModelLoader;
pub use request::{Request, Step};
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
    #[error("the model loader already failed; start a new load")]
    LoaderFailed,
    #[error("this request is over; start a new one")]
    RequestOver,
    #[error("the model gave no finite logit to choose a token from (every logit NaN or -inf)")]
    NoFiniteLogits,
    #[error("internal error: {0}")]
    Internal(&'static str),
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
    /// How pages leaving the GPU are quantized for the spill store; `None` turns spilling off.
    pub spill: Option<SpillFormat>,
    /// Bytes the spill store may hold; its least recently used records go first.
    pub spill_budget_bytes: u64,
    /// Kernel shapes; `None` chooses them for the adapter.
    pub kernels: Option<crate::gpu::ops::KernelShapes>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            kv_budget_bytes: 256 << 20,
            page_size: DEFAULT_PAGE_SIZE,
            max_batch: 256,
            max_context: None,
            spill: Some(SpillFormat::Q8),
            spill_budget_bytes: 1 << 30,
            kernels: None,
        }
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
    /// Prompt tokens whose KV was already cached on the GPU and reused.
    pub reused_tokens: usize,
    /// Prompt tokens whose KV came back from the spill store instead of being prefilled.
    pub restored_tokens: usize,
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
    /// For each of `tokens`, its logit's lead over the runner-up's: where two numerically
    /// different runs part, a small gap (a near tie) explains it.
    pub top2_gaps: Vec<f32>,
    /// The decoded reply, cut before a stop string if one appeared.
    pub text: String,
    pub finish_reason: FinishReason,
    /// A stop string ended the reply (so `text` may end inside `tokens`).
    pub hit_stop_string: bool,
    pub stats: GenerationStats,
}

pub struct Engine {
    /// The model's `general.name`.
    pub model_name: String,
    /// Shared so a native executor can poll the device while a request borrows the engine.
    pub gpu: Arc<Gpu>,
    pub cfg: Config,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<ChatTemplate>,
    pub max_context: usize,
    /// Identifies the model's weights, metadata and tokenizer; seeds the cache's page hashes.
    pub fingerprint: u128,
    cache: PrefixCache,
    /// Ids of finished conversations, so a stateless request resending one matches its pages.
    histories: histories::TokenHistories,
    /// Prompt tokens reused from the cache over every request so far.
    tokens_reused: u64,
    /// The spill tier, once a store is attached (and spilling is on).
    spill: Option<SpillTier>,
    spill_format: Option<SpillFormat>,
    requests: u64,
    /// Owned here so the weights live as long as the bind groups that read them.
    _weights: ModelWeights,
    /// The KV pages the forward pass's bind groups read and write.
    pool: KvPool,
    forward: Forward,
}

impl Engine {
    /// Loads a GGUF model held in memory: the same path as a stream, in one chunk.
    pub async fn load(gpu: Arc<Gpu>, gguf: &[u8], opts: &EngineOptions) -> Result<Self, EngineError> {
        let mut loader = ModelLoader::new(gpu, opts.clone(), Some(gguf.len() as u64));
        loader.push(gguf)?;
        loader.finish().await
    }

    /// The engine over uploaded weights: sizes the KV pool and builds the forward pass.
    #[allow(clippy::too_many_arguments)]
    async fn assemble(
        model_name: String,
        gpu: Arc<Gpu>,
        cfg: Config,
        tokenizer: Tokenizer,
        chat_template: Option<ChatTemplate>,
        fingerprint: u128,
        weights: ModelWeights,
        opts: &EngineOptions,
    ) -> Result<Self, EngineError> {
        let alloc = gpu.alloc_scope("the KV cache and activations");
        let pool = KvPool::new(&gpu, &cfg, opts.page_size, opts.kv_budget_bytes);
        let cache = PrefixCache::new(pool.n_pages as u32, opts.page_size, fingerprint);
        let max_context = opts.max_context.unwrap_or(cfg.n_ctx_train).min(cfg.n_ctx_train).min(cache.capacity_tokens());
        let max_pages = max_context.div_ceil(opts.page_size);
        let shapes = opts.kernels.unwrap_or_else(|| crate::gpu::ops::KernelShapes::for_adapter(&gpu));
        let forward = Forward::new(&gpu, &cfg, &weights, &pool, shapes, opts.max_batch, max_pages, tokenizer.stop_ids());
        alloc.finish().await?;
        let forward = forward?;
        gpu.check()?;
        Ok(Self {
            model_name,
            gpu,
            cfg,
            tokenizer,
            chat_template,
            max_context,
            fingerprint,
            cache,
            histories: Default::default(),
            tokens_reused: 0,
            spill: None,
            spill_format: opts.spill,
            requests: 0,
            _weights: weights,
            pool,
            forward,
        })
    }

    /// Profiles every forward pass from now on (each op in its own timestamped pass), or stops
    /// and returns what was measured. Starting fails when the device has no timestamp queries.
    pub fn profile(&mut self, on: bool) -> Result<Vec<crate::gpu::profile::PassProfile>, EngineError> {
        let done = self.forward.profiler.take().map(|p| p.passes).unwrap_or_default();
        if on {
            let profiler = crate::gpu::profile::Profiler::new(&self.gpu, self.forward.max_ops())
                .ok_or(EngineError::Gpu(GpuError::NoTimestamps(self.gpu.info.name.clone())))?;
            self.forward.profiler = Some(profiler);
        }
        Ok(done)
    }

    pub fn kv_capacity_tokens(&self) -> usize {
        self.cache.capacity_tokens()
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Requests started so far and the prompt tokens they reused from the cache.
    pub fn usage_totals(&self) -> (u64, u64) {
        (self.requests, self.tokens_reused)
    }

    /// Drops every cached prefix from the GPU that no live sequence holds (pinned ones too).
    /// The spill store keeps what it has: see [`clear_spill`](Self::clear_spill).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
    }

    /// Spills pages through `store` from now on (unless spilling is off, or the model's head
    /// size has no quantization group: then false). Pages the store already holds for this
    /// model can be restored at once.
    pub async fn attach_spill_store(&mut self, store: Box<dyn SpillStore>) -> bool {
        let Some(format) = self.spill_format else { return false };
        self.spill = SpillTier::new(&self.gpu, &self.cfg, &self.pool, self.fingerprint, format, store).await;
        self.spill.is_some()
    }

    /// Takes the spill tier out (spilling stops until it is put back with
    /// [`reattach_spill`](Self::reattach_spill)); for benchmarks comparing with and without.
    pub fn detach_spill(&mut self) -> Option<SpillTier> {
        self.spill.take()
    }

    pub fn reattach_spill(&mut self, tier: SpillTier) {
        self.spill = Some(tier);
    }

    /// Writes every cached page the spill store lacks to it (write-behind), so a reload or a
    /// restart finds them; for idle time between requests.
    pub async fn write_behind(&mut self) {
        while self.write_behind_some(usize::MAX).await {}
    }

    /// Writes up to `max_pages` of them (prefixes first); true while more remain. An event loop
    /// calls it between other work, so a request waits for one small batch at most.
    pub async fn write_behind_some(&mut self, max_pages: usize) -> bool {
        match &mut self.spill {
            Some(spill) => spill.write_behind(&self.gpu, &self.cache, max_pages).await,
            None => false,
        }
    }

    /// Drops this model's records from the spill store.
    pub async fn clear_spill(&mut self) {
        if let Some(spill) = &mut self.spill {
            spill.clear().await;
        }
    }

    /// The K and V values of pool page `page`, per layer K then V (the spill record's slices),
    /// for tests and tools that inspect real KV.
    pub async fn kv_page_values(&self, page: u32) -> Result<Vec<Vec<f32>>, EngineError> {
        let words = (self.pool.page_size * self.cfg.kv_dim() / 2) as u64;
        let mut slices = Vec::with_capacity(2 * self.cfg.n_layers);
        for (k, v) in self.pool.k.iter().zip(&self.pool.v) {
            for buf in [k, v] {
                let pairs = crate::gpu::readback::read_u32(&self.gpu, buf, page as u64 * words, words).await?;
                slices.push(pairs.iter().flat_map(|w| [*w as u16, (*w >> 16) as u16]).map(|h| half::f16::from_bits(h).to_f32()).collect());
            }
        }
        Ok(slices)
    }

    pub fn spill_stats(&self) -> Option<SpillStats> {
        self.spill.as_ref().map(SpillTier::stats)
    }

    /// Makes `seq`'s pages cover `len` tokens; pages evicted for it are quantized for the
    /// spill tier before anything can overwrite them.
    fn reserve(&mut self, seq: &mut Sequence, len: usize) -> Result<(), CacheError> {
        let evicted = self.cache.reserve(seq, len)?;
        if let (Some(spill), false) = (&mut self.spill, evicted.is_empty()) {
            spill.capture(&self.gpu, evicted);
        }
        Ok(())
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
        Ok(self.tokenizer.encode(&self.render_chat(messages, true)?, true)?)
    }

    /// Tokens of a conversation prefix to pin (the assistant's turn not opened), remembered so
    /// that later conversations starting with it start with exactly these ids.
    pub fn chat_prefix_tokens(&mut self, messages: &[crate::tokenizer::Message]) -> Result<Vec<u32>, EngineError> {
        let text = self.render_chat(messages, false)?;
        let ids = self.histories.encode(&self.tokenizer, &text)?;
        self.histories.record(text, ids.clone());
        Ok(ids)
    }

    pub fn render_chat(&self, messages: &[crate::tokenizer::Message], open: bool) -> Result<String, EngineError> {
        let template = self.chat_template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        Ok(template.render(messages, open)?)
    }

    /// Ends a sequence: its full pages stay cached for later requests, the rest is freed.
    pub fn release(&mut self, seq: &mut Sequence) {
        self.cache.release(seq);
    }

    /// Computes the KV of `tokens[seq.len()..]` and returns the last token's logits.
    async fn prefill(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let start = seq.len();
        self.reserve(seq, tokens.len())?;
        let mut logits = None;
        let mut pos = start;
        while pos < tokens.len() {
            let end = (pos + self.forward.max_batch).min(tokens.len());
            if end == tokens.len() {
                logits = Some(self.forward.run_logits(&self.gpu, &tokens[pos..end], pos, seq.pages()).await?);
            } else {
                self.forward.run(&self.gpu, &tokens[pos..end], pos, seq.pages()).await?;
            }
            pos = end;
        }
        seq.extend(&tokens[start..]);
        logits.ok_or(EngineError::Internal("prefill ran no batch"))
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
}
