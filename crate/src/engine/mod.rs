//! The engine: a model loaded onto a backend (`backend`: WebGPU or the CPU), the prefix cache
//! over its KV pages, the spill tier, and requests stepped one prefill batch or one token at
//! a time (`request`).
//!
//! One request: tokens → keep the part of the sequence's history that matches → restore the
//! pages the spill store holds next → prefill the rest at offset = kept length (in batches of
//! up to `max_batch`) → sample the first token (TTFT) → decode until EOS, a stop string,
//! `max_tokens` or the context limit.

pub mod backend;
pub mod choices;
pub mod constraint;
pub mod histories;
pub mod loader;
pub mod request;
pub mod sampling;
pub mod session;
pub mod spill;
mod stop;

use std::sync::Arc;

use web_time::Instant;

use crate::cpu::CpuError;
use crate::gguf::GgufError;
use crate::gpu::context::{Gpu, GpuError};
use crate::kv::spill::{SpillFormat, SpillStore};
use crate::kv::{CacheError, CacheStats, PrefixCache, DEFAULT_PAGE_SIZE};
use crate::model::{Config, ModelError};
use crate::tokenizer::{ChatTemplate, Conversation, Message, Tokenizer, TokenizerError};

use backend::{Backend, Head, HeadOut, Pick};
use constraint::{ConstraintError, Grammars};
use sampling::SamplingParams;
use spill::{SpillStats, SpillTier};
pub use backend::{BackendInfo, Target};
pub use choices::{ChoiceStep, Choices};
pub use loader::ModelLoader;
pub use request::{Request, Step};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Cpu(#[from] CpuError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the prompt is {prompt_tokens} tokens, over the context limit of {limit} tokens")]
    PromptTooLong { prompt_tokens: usize, limit: usize },
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the model has no chat template (no tokenizer.chat_template in its GGUF): send it completions with a prompt instead")]
    NoChatTemplate,
    #[error("the model loader already failed; start a new load")]
    LoaderFailed,
    #[error("this request is over; start a new one")]
    RequestOver,
    #[error("the model gave no finite logit to choose a token from (every logit NaN or -inf)")]
    NoFiniteLogits,
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("internal error: {0}")]
    Internal(&'static str),
    #[error(transparent)]
    Constraint(#[from] ConstraintError),
}

/// Engine settings chosen by the embedding application.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Bytes of the backend's memory for the KV pool (GPU memory clamped to the adapter's
    /// limits, or host memory).
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
    /// GPU kernel shapes; `None` chooses them for the adapter.
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
#[derive(Debug, Clone, serde::Serialize, tsify::Tsify)]
#[tsify(missing_as_null)]
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
    /// With a response format: what computing the grammar's token masks cost.
    pub mask: Option<MaskStats>,
}

/// The cost of a constrained request's token masks (one per step), in milliseconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, tsify::Tsify)]
#[tsify(missing_as_null)]
pub struct MaskStats {
    pub steps: usize,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl MaskStats {
    /// None for a request that computed no mask.
    pub fn of(ms: &[f32]) -> Option<Self> {
        let mut sorted: Vec<f64> = ms.iter().map(|&m| m as f64).collect();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let max_ms = *sorted.last()?;
        Some(Self { steps: sorted.len(), mean_ms: sorted.iter().sum::<f64>() / sorted.len() as f64, median_ms: at(0.5), p99_ms: at(0.99), max_ms })
    }
}

#[derive(Debug, Clone)]
pub struct Generation {
    /// Every token sampled, up to (not including) an end-of-sequence token.
    pub tokens: Vec<u32>,
    /// For each of `tokens`, its logit's lead over the runner-up's: where two numerically
    /// different runs part, a small gap (a near tie) explains it.
    pub top2_gaps: Vec<f32>,
    /// With `logprobs`: for each of `tokens`, its log-probability and the likeliest alternatives'.
    pub logprobs: Vec<sampling::TokenLogprob>,
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
    backend: Backend,
    /// The grammar compiler over this model's vocabulary, from the first constrained request.
    grammars: Option<Arc<Grammars>>,
}

/// The longest sequence an engine serves: the caller's cap, the model's training context and
/// the KV pool's capacity, whichever is least.
pub fn context_limit(opts: &EngineOptions, cfg: &Config, capacity_tokens: usize) -> usize {
    opts.max_context.unwrap_or(cfg.n_ctx_train).min(cfg.n_ctx_train).min(capacity_tokens)
}

/// Drives an engine's futures to completion on this thread (CLI, tests): natively the GPU,
/// where there is one, is polled between polls; the CPU backend's futures are ready at once.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Default)]
pub struct Poller(Option<Arc<Gpu>>);

#[cfg(not(target_arch = "wasm32"))]
impl Poller {
    pub fn for_target(target: &Target) -> Self {
        match target {
            Target::Gpu(gpu) => Self(Some(gpu.clone())),
            Target::Cpu(_) => Self(None),
        }
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        crate::gpu::executor::block_on_device(self.0.as_deref(), f)
    }
}

impl Engine {
    /// Loads a GGUF model held in memory: the same path as a stream, in one chunk.
    pub async fn load(target: Target, gguf: &[u8], opts: &EngineOptions) -> Result<Self, EngineError> {
        let mut loader = ModelLoader::new(target, opts.clone(), Some(gguf.len() as u64));
        loader.push(gguf)?;
        loader.finish().await
    }

    /// The engine over a backend holding the model.
    fn assemble(model_name: String, cfg: Config, tokenizer: Tokenizer, chat_template: Option<ChatTemplate>, fingerprint: u128, backend: Backend, n_pages: usize, opts: &EngineOptions) -> Self {
        let cache = PrefixCache::new(n_pages as u32, opts.page_size, fingerprint);
        let max_context = context_limit(opts, &cfg, cache.capacity_tokens());
        Self {
            model_name,
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
            backend,
            grammars: None,
        }
    }

    /// Which backend computes, on what, with how many threads.
    pub fn backend_info(&self) -> BackendInfo {
        self.backend.info()
    }

    /// The GPU, when the engine runs on one.
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        self.backend.gpu()
    }

    /// What drives this engine's futures natively.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn poller(&self) -> Poller {
        Poller(self.backend.gpu().cloned())
    }

    /// Bytes the GPU has read back so far (0 on the CPU).
    pub fn bytes_read_back(&self) -> u64 {
        self.gpu().map_or(0, |g| g.bytes_read_back())
    }

    /// Profiles every forward pass from now on (each op in its own timestamped pass), or stops
    /// and returns what was measured. Starting fails on the CPU and on GPUs without timestamp
    /// queries.
    pub fn profile(&mut self, on: bool) -> Result<Vec<crate::gpu::profile::PassProfile>, EngineError> {
        match &mut self.backend {
            Backend::Gpu(b) => b.profile(on),
            Backend::Cpu(_) if on => Err(EngineError::Unsupported("profiling per kernel needs a GPU with timestamp queries")),
            Backend::Cpu(_) => Ok(Vec::new()),
        }
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

    /// Drops every cached prefix that no live sequence holds (pinned ones too). The spill
    /// store keeps what it has: see [`clear_spill`](Self::clear_spill).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
    }

    /// Spills pages through `store` from now on (unless spilling is off, or the model's head
    /// size has no quantization group: then false). Pages the store already holds for this
    /// model can be restored at once.
    pub async fn attach_spill_store(&mut self, store: Box<dyn SpillStore>) -> bool {
        let Some(format) = self.spill_format else { return false };
        self.spill = SpillTier::new(&mut self.backend, &self.cfg, self.cache.page_size(), self.fingerprint, format, store).await;
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
            Some(spill) => spill.write_behind(&mut self.backend, &self.cache, max_pages).await,
            None => false,
        }
    }

    /// Drops this model's records from the spill store.
    pub async fn clear_spill(&mut self) {
        if let Some(spill) = &mut self.spill {
            spill.clear(&mut self.backend).await;
        }
    }

    /// The K and V values of page `page`, per layer K then V (the spill record's slices), for
    /// tests and tools that inspect real KV.
    pub async fn kv_page_values(&self, page: u32) -> Result<Vec<Vec<f32>>, EngineError> {
        self.backend.page_values(&self.cfg, page).await
    }

    pub fn spill_stats(&self) -> Option<SpillStats> {
        self.spill.as_ref().map(SpillTier::stats)
    }

    /// Makes `seq`'s pages cover `len` tokens; pages evicted for it are quantized for the
    /// spill tier before anything can overwrite them.
    fn reserve(&mut self, seq: &mut Sequence, len: usize) -> Result<(), CacheError> {
        let evicted = self.cache.reserve(seq, len)?;
        if let (Some(spill), false) = (&mut self.spill, evicted.is_empty()) {
            spill.capture(&mut self.backend, evicted);
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
    pub fn chat_tokens(&self, chat: &Conversation) -> Result<Vec<u32>, EngineError> {
        Ok(self.tokenizer.encode(&self.render_chat(chat, true)?, true)?)
    }

    /// Tokens of a conversation prefix to pin (the assistant's turn not opened), remembered so
    /// that later conversations starting with it start with exactly these ids.
    pub fn chat_prefix_tokens(&mut self, chat: &Conversation) -> Result<Vec<u32>, EngineError> {
        let text = self.render_chat(chat, false)?;
        let ids = self.histories.encode(&self.tokenizer, &text)?;
        self.histories.record(text, ids.clone());
        Ok(ids)
    }

    /// How the model is shown tools and writes its calls.
    pub fn tool_dialect(&self) -> crate::api::Dialect {
        crate::api::Dialect::of(self.chat_template.as_ref())
    }

    pub fn render_chat(&self, chat: &Conversation, open: bool) -> Result<String, EngineError> {
        let template = self.chat_template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        Ok(template.render(chat, open)?)
    }

    /// Ends a sequence: its full pages stay cached for later requests, the rest is freed.
    pub fn release(&mut self, seq: &mut Sequence) {
        self.cache.release(seq);
    }

    /// Runs a forward pass over the whole of `tokens` after what `seq` already holds (or the
    /// cache and the spill store have) and returns the logits of the last token: a request
    /// that stops after its prefill. The oracle tests compare these against the CPU reference.
    pub async fn logits(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let mut req = self.begin(seq, tokens, &SamplingParams::greedy(0))?;
        req.wants_logits = true;
        let result = loop {
            match self.step(&mut req).await {
                Ok(Step::Prefill { done, total }) if done < total => {}
                Ok(_) => break req.take_logits().ok_or(EngineError::Internal("a prefill without logits")),
                Err(e) => break Err(e),
            }
        };
        self.abort(&mut req);
        *seq = req.into_sequence();
        result
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

    /// Starts a request for `prompt` (the whole token history of the conversation), reusing
    /// what `seq` holds and the longest cached prefix. On error nothing changed and `seq` is
    /// still the caller's; on success the request owns it.
    pub fn start(&mut self, seq: &mut Sequence, prompt: &[u32], params: &SamplingParams) -> Result<Request, EngineError> {
        let req = self.begin(seq, prompt, params)?;
        self.requests += 1;
        self.tokens_reused += req.reused as u64;
        Ok(req)
    }

    /// `start` without counting it among the requests (a pin or a bare `logits`).
    fn begin(&mut self, seq: &mut Sequence, prompt: &[u32], params: &SamplingParams) -> Result<Request, EngineError> {
        self.backend.check()?;
        self.check_prompt(prompt)?;
        // A response format's compilation counts toward the time to the first token.
        let started = Instant::now();
        let constraint = match &params.response_format {
            Some(format) => self.grammars()?.constraint(format)?,
            None => None,
        };
        let reused = self.cache.adopt(seq, prompt);
        if let Err(e) = self.reserve(seq, prompt.len()) {
            self.cache.commit(seq);
            return Err(e.into());
        }
        let mut req = Request::new(std::mem::take(seq), prompt, params, reused, started);
        req.constraint = constraint;
        Ok(req)
    }

    /// The grammar compiler, built on first use (a trie of the vocabulary: milliseconds).
    fn grammars(&mut self) -> Result<Arc<Grammars>, EngineError> {
        if let Some(g) = &self.grammars {
            return Ok(g.clone());
        }
        let g = Arc::new(Grammars::new(&self.tokenizer)?);
        self.grammars = Some(g.clone());
        Ok(g)
    }

    /// Starts a chat request for the whole conversation `messages` (stateless, like OpenAI's
    /// API): earlier turns this engine answered start with the ids it generated for them. What
    /// `seq` holds of it is reused too (a session's own last partial page); on error `seq` is
    /// still the caller's.
    pub fn start_chat(&mut self, seq: &mut Sequence, chat: &Conversation, params: &SamplingParams) -> Result<Request, EngineError> {
        let text = self.render_chat(chat, true)?;
        let prompt = self.histories.encode(&self.tokenizer, &text)?;
        let mut req = self.start(seq, &prompt, params)?;
        req.chat = Some((chat.clone(), text));
        Ok(req)
    }

    /// Remembers a finished chat's ids: its prompt, the reply as generated and the template's
    /// end of turn. A reply cut by a stop string inside a token is not remembered (its text
    /// no longer matches its ids).
    fn remember_reply(&mut self, req: &Request, generation: &Generation) -> Result<(), EngineError> {
        let Some((chat, prompt_text)) = &req.chat else { return Ok(()) };
        if generation.hit_stop_string {
            return Ok(());
        }
        let mut chat = chat.clone();
        chat.messages.push(Message::new("assistant", generation.text.clone()));
        let rendered = self.render_chat(&chat, false)?;
        let Some(closing) = rendered.strip_prefix(prompt_text.as_str()).and_then(|s| s.strip_prefix(generation.text.as_str())) else {
            return Ok(());
        };
        let mut ids = req.prompt.clone();
        ids.extend_from_slice(&generation.tokens);
        ids.extend(self.tokenizer.encode(closing, false)?);
        self.histories.record(rendered, ids);
        Ok(())
    }

    /// Runs the request's next step. After `Done` or an error the request is over: its full
    /// pages are committed to the cache and further steps fail.
    pub async fn step(&mut self, req: &mut Request) -> Result<Step, EngineError> {
        if req.over {
            return Err(EngineError::RequestOver);
        }
        let step = self.step_inner(req).await;
        if matches!(step, Err(_) | Ok(Step::Done { .. })) {
            req.over = true;
            // The prompt's and the reply's full pages become reusable by later requests.
            self.cache.commit(&mut req.seq);
        }
        if let Ok(Step::Done { generation, .. }) = &step {
            self.remember_reply(req, generation)?;
        }
        step
    }

    /// Ends the request now, keeping what it computed in the cache.
    pub fn abort(&mut self, req: &mut Request) -> Generation {
        if !req.over {
            req.over = true;
            self.cache.commit(&mut req.seq);
        }
        req.finish.get_or_insert(FinishReason::Aborted);
        req.generation()
    }

    async fn step_inner(&mut self, req: &mut Request) -> Result<Step, EngineError> {
        // Restore: the pages after the cache's match, from the spill store, as the first step.
        if !req.restore_checked {
            req.restore_checked = true;
            if let Some(spill) = &mut self.spill {
                req.restored = spill.restore(&mut self.backend, self.cache.root_hash(), &mut req.seq, &req.prompt).await;
                if req.restored > 0 {
                    self.backend.check()?;
                    return Ok(Step::Prefill { done: req.seq.len(), total: req.prompt.len() });
                }
            }
        }
        // Prefill: one batch of the prompt per step.
        let pos = req.seq.len();
        if pos < req.prompt.len() {
            let end = (pos + self.backend.max_batch()).min(req.prompt.len());
            let last = end == req.prompt.len();
            if last {
                self.ready_mask(req)?;
            }
            let head = if last { self.head_for(req) } else { Head::None };
            let out = self.backend.forward(&req.prompt[pos..end], pos, req.seq.pages(), head, self.tokenizer.stop_ids()).await?;
            if last {
                req.next = Some(out);
                req.prefill_s = req.started.elapsed().as_secs_f64();
            }
            req.seq.extend(&req.prompt[pos..end]);
            return Ok(Step::Prefill { done: end, total: req.prompt.len() });
        }
        if req.finish.is_some() {
            let tail = req.flush_text();
            return Ok(Step::Done { generation: req.generation(), tail });
        }
        // Decode: compute the KV of the token sampled last step, then sample the next.
        if let Some(token) = req.unfed.take() {
            self.ready_mask(req)?;
            let head = self.head_for(req);
            let out = self.backend.forward(&[token], req.seq.len(), req.seq.pages(), head, self.tokenizer.stop_ids()).await?;
            req.seq.extend(&[token]);
            req.next = Some(out);
        }
        let (token, top2_gap, logprob) = match req.next.take().ok_or(EngineError::Internal("no logits to sample from"))? {
            HeadOut::None => return Err(EngineError::Internal("no logits to sample from")),
            HeadOut::Picked(top2) => (top2.index.ok_or(EngineError::NoFiniteLogits)?, top2.gap(), None),
            HeadOut::Candidates(cand) => {
                let token = req.sampler.sample_sorted(&cand).ok_or(EngineError::NoFiniteLogits)?;
                let gap = match cand.as_slice() {
                    [a, b, ..] => a.1 - b.1,
                    _ => f32::INFINITY,
                };
                (token, gap, None)
            }
            HeadOut::Logits(mut logits) => {
                req.params.adjust(&mut logits, req.seq.tokens());
                if let Some(constraint) = &mut req.constraint {
                    let started = Instant::now();
                    constraint.mask(&mut logits, self.tokenizer.stop_ids())?;
                    req.mask_ms.push((started.elapsed().as_secs_f64() * 1e3) as f32);
                } else if req.params.ignore_eos {
                    // As llama.cpp's ignore_eos: the end-of-sequence tokens are never chosen.
                    for &id in self.tokenizer.stop_ids() {
                        if let Some(l) = logits.get_mut(id as usize) {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
                let token = req.sampler.sample(&logits);
                let logprob = req.params.logprobs.map(|top| sampling::TokenLogprob::of(&logits, token, top));
                (token, sampling::top2(&logits, |_| true).gap(), logprob)
            }
        };
        req.ttft_s.get_or_insert_with(|| req.started.elapsed().as_secs_f64());
        req.first_token.get_or_insert_with(Instant::now);
        if !req.params.ignore_eos && self.tokenizer.stop_ids().contains(&token) {
            req.finish = Some(FinishReason::Stop);
            let tail = req.flush_text();
            return Ok(Step::Done { generation: req.generation(), tail });
        }
        if let Some(constraint) = &mut req.constraint {
            constraint.consume(token)?;
        }
        req.out.push(token);
        req.gaps.push(top2_gap);
        req.logprobs.extend(logprob);
        let piece = req.decoder.push(&self.tokenizer, token)?;
        let (text, stopped) = req.stops.push(&piece);
        let next_len = req.seq.len() + 1;
        req.finish = if stopped {
            Some(FinishReason::Stop)
        } else if req.out.len() >= req.params.max_tokens {
            Some(FinishReason::Length)
        } else if next_len > self.max_context || self.reserve(&mut req.seq, next_len).is_err() {
            Some(FinishReason::ContextFull)
        } else {
            req.unfed = Some(token);
            None
        };
        Ok(Step::Token { token, text })
    }

    /// How the pass over the last known token ends: for greedy decoding the backend's pick, for
    /// top-k sampling where the backend serves it the largest logits, otherwise the logits. A
    /// pick under a grammar takes the step's mask ([`ready_mask`](Self::ready_mask)).
    fn head_for<'r>(&self, req: &'r Request) -> Head<'r> {
        // Under a grammar the mask decides where the stop tokens may come.
        let pick = Pick { ban_stops: req.params.ignore_eos && req.constraint.is_none(), allowed: req.allowed.as_deref() };
        if req.wants_logits || req.params.needs_logits() {
            Head::Logits
        } else if req.params.is_greedy() {
            Head::Greedy(pick)
        } else if self.backend.has_top_k() && req.params.needs_at_most(crate::gpu::ops::MAX_TOP_K) {
            Head::TopK(pick)
        } else {
            Head::Logits
        }
    }

    /// Before the pass over the last known token: under a grammar, when the backend picks, the
    /// grammar's mask for the pick (so the pass reads back no logits). Its time goes to stats.
    fn ready_mask(&self, req: &mut Request) -> Result<(), EngineError> {
        let picks = matches!(self.head_for(req), Head::Greedy(_) | Head::TopK(_));
        req.allowed = None;
        if let (true, Some(constraint)) = (picks, &mut req.constraint) {
            let started = Instant::now();
            req.allowed = Some(constraint.allowed(self.tokenizer.stop_ids(), self.cfg.vocab_size)?);
            req.mask_ms.push((started.elapsed().as_secs_f64() * 1e3) as f32);
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
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generation, EngineError> {
        let mut req = self.start(seq, prompt, params)?;
        let result = self.run_to_end(&mut req, on_text).await;
        *seq = req.into_sequence();
        result
    }

    /// Steps `req` until it ends, handing each piece of text to `on_text` (false aborts).
    pub async fn run_to_end(&mut self, req: &mut Request, mut on_text: impl FnMut(&str) -> bool) -> Result<Generation, EngineError> {
        loop {
            match self.step(req).await? {
                Step::Prefill { .. } => {}
                Step::Token { text, .. } => {
                    if !text.is_empty() && !on_text(&text) {
                        return Ok(self.abort(req));
                    }
                }
                Step::Done { generation, tail } => {
                    if !tail.is_empty() {
                        on_text(&tail);
                    }
                    return Ok(generation);
                }
            }
        }
    }
}
