//! One request, driven a step at a time: `Engine::start` adopts the longest cached prefix and
//! reserves pages; each `Engine::step` runs one prefill batch or decodes one token, then hands
//! control back. A browser worker returns to its event loop between steps (so an abort lands
//! within one batch or one token and nothing re-enters the engine while it is borrowed); the
//! CLI loops over the same steps in `Engine::generate`.

use web_time::Instant;

use crate::gpu::ops::{Top2, MAX_TOP_K};
use crate::gpu::readback::work_done;
use crate::kv::Sequence;
use crate::tokenizer::{Message, StreamDecoder};

use super::sampling::{Sampler, SamplingParams};
use super::stop::StopMatcher;
use super::{Engine, EngineError, FinishReason, Generation, GenerationStats};

/// What one step did.
#[derive(Debug)]
pub enum Step {
    /// A prefill batch ran: `done` of the prompt's `total` tokens now have KV (reused included).
    Prefill { done: usize, total: usize },
    /// A token was sampled. `text` is what may be shown now: empty while an unfinished
    /// character or a possible stop string is held back.
    Token { token: u32, text: String },
    /// The request ended. `tail` is text held back until now, not yet given by a `Token` step.
    Done { generation: Generation, tail: String },
}

/// What the forward pass over the last known token gave the next step to choose from.
enum Next {
    Picked(Top2),
    /// The largest logits with their ids, largest first (top-k sampling on a GPU).
    Candidates(Vec<(u32, f32)>),
    Logits(Vec<f32>),
}

/// A request in flight. Its sequence holds locked cache pages: end it through `Engine::step`
/// returning `Done` or an error, or `Engine::abort`, then `release` the sequence.
pub struct Request {
    seq: Sequence,
    prompt: Vec<u32>,
    params: SamplingParams,
    sampler: Sampler,
    decoder: StreamDecoder,
    stops: StopMatcher,
    out: Vec<u32>,
    /// Each sampled token's top-2 logit gap.
    gaps: Vec<f32>,
    reused: usize,
    restored: usize,
    /// The spill store was probed for the pages after the GPU match.
    restore_checked: bool,
    started: Instant,
    prefill_s: f64,
    first_token: Option<Instant>,
    ttft_s: Option<f64>,
    /// What the last position's forward pass gave, once prefill is done and until sampled.
    next: Option<Next>,
    /// A sampled token whose KV is not computed yet (the next step's forward pass).
    unfed: Option<u32>,
    finish: Option<FinishReason>,
    over: bool,
    /// For a chat request: the conversation, to remember the ids of its reply.
    chat: Option<(Vec<Message>, String)>,
}

impl Request {
    /// The request's sequence (its cached pages), for the caller to keep or release.
    pub fn into_sequence(self) -> Sequence {
        self.seq
    }

    /// Prompt tokens whose KV exists: reused from the cache or prefilled so far.
    pub fn prompt_done(&self) -> usize {
        self.seq.len().min(self.prompt.len())
    }
}

impl Engine {
    /// Starts a request for `prompt` (the whole token history of the conversation), reusing
    /// what `seq` holds and the longest cached prefix. On error nothing changed and `seq` is
    /// still the caller's; on success the request owns it.
    pub fn start(&mut self, seq: &mut Sequence, prompt: &[u32], params: &SamplingParams) -> Result<Request, EngineError> {
        self.gpu.check()?;
        self.check_prompt(prompt)?;
        let started = Instant::now();
        let reused = self.cache.adopt(seq, prompt);
        if let Err(e) = self.reserve(seq, prompt.len()) {
            self.cache.commit(seq);
            return Err(e.into());
        }
        self.requests += 1;
        self.tokens_reused += reused as u64;
        Ok(Request {
            seq: std::mem::take(seq),
            prompt: prompt.to_vec(),
            params: params.clone(),
            sampler: Sampler::new(params.clone()),
            decoder: StreamDecoder::new(),
            stops: StopMatcher::new(params.stop.clone()),
            out: Vec::new(),
            gaps: Vec::new(),
            reused,
            restored: 0,
            restore_checked: false,
            started,
            prefill_s: 0.0,
            first_token: None,
            ttft_s: None,
            next: None,
            unfed: None,
            finish: None,
            over: false,
            chat: None,
        })
    }

    /// Starts a chat request for the whole conversation `messages` (stateless, like OpenAI's
    /// API): earlier turns this engine answered start with the ids it generated for them.
    pub fn start_chat(&mut self, messages: &[Message], params: &SamplingParams) -> Result<Request, EngineError> {
        let text = self.render_chat(messages, true)?;
        let prompt = self.histories.encode(&self.tokenizer, &text)?;
        let mut seq = Sequence::default();
        let mut req = self.start(&mut seq, &prompt, params).inspect_err(|_| self.cache.release(&mut seq))?;
        req.chat = Some((messages.to_vec(), text));
        Ok(req)
    }

    /// Remembers a finished chat's ids: its prompt, the reply as generated and the template's
    /// end of turn. A reply cut by a stop string inside a token is not remembered (its text
    /// no longer matches its ids).
    fn remember_reply(&mut self, req: &Request, generation: &Generation) -> Result<(), EngineError> {
        let Some((messages, prompt_text)) = &req.chat else { return Ok(()) };
        if generation.hit_stop_string {
            return Ok(());
        }
        let mut messages = messages.clone();
        messages.push(Message::new("assistant", generation.text.clone()));
        let rendered = self.render_chat(&messages, false)?;
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
        self.generation(req)
    }

    async fn step_inner(&mut self, req: &mut Request) -> Result<Step, EngineError> {
        // Restore: the pages after the GPU match, from the spill store, as the first step.
        if !req.restore_checked {
            req.restore_checked = true;
            if let Some(spill) = &mut self.spill {
                req.restored = spill.restore(&self.gpu, self.cache.root_hash(), &mut req.seq, &req.prompt).await;
                if req.restored > 0 {
                    self.gpu.check()?;
                    return Ok(Step::Prefill { done: req.seq.len(), total: req.prompt.len() });
                }
            }
        }
        // Prefill: one batch of the prompt per step.
        let pos = req.seq.len();
        if pos < req.prompt.len() {
            let end = (pos + self.forward.max_batch).min(req.prompt.len());
            if end == req.prompt.len() {
                req.next = Some(self.forward_last(&req.prompt[pos..end], pos, req.seq.pages(), &req.params).await?);
                req.prefill_s = req.started.elapsed().as_secs_f64();
            } else {
                self.forward.run(&self.gpu, &req.prompt[pos..end], pos, req.seq.pages()).await?;
                work_done(&self.gpu).await?;
            }
            self.gpu.check()?;
            req.seq.extend(&req.prompt[pos..end]);
            return Ok(Step::Prefill { done: end, total: req.prompt.len() });
        }
        if req.finish.is_some() {
            let tail = self.flush_text(req);
            return Ok(Step::Done { generation: self.generation(req), tail });
        }
        // Decode: compute the KV of the token sampled last step, then sample the next.
        if let Some(token) = req.unfed.take() {
            let next = self.forward_last(&[token], req.seq.len(), req.seq.pages(), &req.params).await?;
            self.gpu.check()?;
            req.seq.extend(&[token]);
            req.next = Some(next);
        }
        let (token, top2_gap) = match req.next.take().ok_or(EngineError::Internal("no logits to sample from"))? {
            Next::Picked(top2) => (top2.index.ok_or(EngineError::NoFiniteLogits)?, top2.gap()),
            Next::Candidates(cand) => {
                let token = req.sampler.sample_sorted(&cand).ok_or(EngineError::NoFiniteLogits)?;
                let gap = match cand.as_slice() {
                    [a, b, ..] => a.1 - b.1,
                    _ => f32::INFINITY,
                };
                (token, gap)
            }
            Next::Logits(mut logits) => {
                if req.params.ignore_eos {
                    // As llama.cpp's ignore_eos: the end-of-sequence tokens are never chosen.
                    for &id in self.tokenizer.stop_ids() {
                        if let Some(l) = logits.get_mut(id as usize) {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
                (req.sampler.sample(&logits), top2_gap(&logits))
            }
        };
        req.ttft_s.get_or_insert_with(|| req.started.elapsed().as_secs_f64());
        req.first_token.get_or_insert_with(Instant::now);
        if !req.params.ignore_eos && self.tokenizer.stop_ids().contains(&token) {
            req.finish = Some(FinishReason::Stop);
            let tail = self.flush_text(req);
            return Ok(Step::Done { generation: self.generation(req), tail });
        }
        req.out.push(token);
        req.gaps.push(top2_gap);
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

    /// Runs the batch ending the known tokens and returns what choosing the next one needs:
    /// for greedy decoding the GPU's pick (16 bytes read back), for top-k sampling on a GPU its
    /// largest logits (512 bytes), otherwise the logits.
    async fn forward_last(&mut self, tokens: &[u32], pos: usize, pages: &[u32], params: &SamplingParams) -> Result<Next, EngineError> {
        Ok(if params.is_greedy() {
            Next::Picked(self.forward.run_greedy(&self.gpu, tokens, pos, pages, params.ignore_eos).await?)
        } else if self.forward.has_gpu_top_k() && params.needs_at_most(MAX_TOP_K) {
            Next::Candidates(self.forward.run_top_k(&self.gpu, tokens, pos, pages, params.ignore_eos).await?)
        } else {
            Next::Logits(self.forward.run_logits(&self.gpu, tokens, pos, pages).await?)
        })
    }

    /// Text held back for a possible stop string or an unfinished character, released at the end.
    fn flush_text(&self, req: &mut Request) -> String {
        if req.stops.stopped() {
            return String::new();
        }
        let (mut rest, stopped) = req.stops.push(&req.decoder.finish());
        if !stopped {
            rest.push_str(&req.stops.flush());
        }
        rest
    }

    fn generation(&self, req: &Request) -> Generation {
        let prefilled = req.prompt_done().saturating_sub(req.reused + req.restored);
        let prefill_s = if req.prefill_s > 0.0 { req.prefill_s } else { req.started.elapsed().as_secs_f64() };
        let decode_s = req.first_token.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Generation {
            stats: GenerationStats {
                prompt_tokens: req.prompt.len(),
                reused_tokens: req.reused,
                restored_tokens: req.restored,
                prefilled_tokens: prefilled,
                generated_tokens: req.out.len(),
                ttft_ms: req.ttft_s.unwrap_or(prefill_s) * 1e3,
                prefill_tokens_per_s: prefilled as f64 / prefill_s.max(1e-9),
                decode_tokens_per_s: req.out.len().saturating_sub(1) as f64 / decode_s.max(1e-9),
            },
            tokens: req.out.clone(),
            top2_gaps: req.gaps.clone(),
            text: req.stops.text().to_string(),
            finish_reason: req.finish.unwrap_or(FinishReason::Aborted),
            hit_stop_string: req.stops.stopped(),
        }
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
        let mut req = self.start(seq, prompt, params)?;
        let result = loop {
            match self.step(&mut req).await {
                Ok(Step::Prefill { .. }) => {}
                Ok(Step::Token { text, .. }) => {
                    if !text.is_empty() && !on_text(&text) {
                        break Ok(self.abort(&mut req));
                    }
                }
                Ok(Step::Done { generation, tail }) => {
                    if !tail.is_empty() {
                        on_text(&tail);
                    }
                    break Ok(generation);
                }
                Err(e) => break Err(e),
            }
        };
        *seq = req.into_sequence();
        result
    }
}

/// The lead of the largest logit over the second largest.
fn top2_gap(logits: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &l in logits {
        if l > a {
            b = a;
            a = l;
        } else if l > b {
            b = l;
        }
    }
    a - b
}
