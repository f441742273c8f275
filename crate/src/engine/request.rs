//! A request in flight, stepped one prefill batch or one token at a time (`Engine::step`), so
//! its caller gets control back between steps. A browser worker returns to its event loop
//! between steps (so an abort lands within one batch or one token and nothing re-enters the
//! engine while it is borrowed); the CLI loops over the same steps in `Engine::generate`.

use web_time::Instant;

use crate::kv::Sequence;
use crate::tokenizer::{Conversation, StreamDecoder};

use super::backend::HeadOut;
use super::sampling::{Sampler, SamplingParams, TokenLogprob};
use super::stop::StopMatcher;
use super::{FinishReason, Generation, GenerationStats};

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

/// A request in flight. Its sequence holds locked cache pages: end it through `Engine::step`
/// returning `Done` or an error, or `Engine::abort`, then `release` the sequence.
pub struct Request {
    pub(super) seq: Sequence,
    pub(super) prompt: Vec<u32>,
    pub(super) params: SamplingParams,
    pub(super) sampler: Sampler,
    pub(super) decoder: StreamDecoder,
    pub(super) stops: StopMatcher,
    pub(super) out: Vec<u32>,
    /// Each sampled token's top-2 logit gap.
    pub(super) gaps: Vec<f32>,
    pub(super) reused: usize,
    pub(super) restored: usize,
    /// The spill store was probed for the pages after the cache's match.
    pub(super) restore_checked: bool,
    pub(super) started: Instant,
    pub(super) prefill_s: f64,
    pub(super) first_token: Option<Instant>,
    pub(super) ttft_s: Option<f64>,
    /// What the last position's forward pass gave, once prefill is done and until sampled.
    pub(super) next: Option<HeadOut>,
    /// The prompt's last pass ends with its logits (`Engine::logits`), not a pick.
    pub(super) wants_logits: bool,
    /// A sampled token whose KV is not computed yet (the next step's forward pass).
    pub(super) unfed: Option<u32>,
    pub(super) finish: Option<FinishReason>,
    pub(super) over: bool,
    /// For a chat request: the conversation, to remember the ids of its reply.
    pub(super) chat: Option<(Conversation, String)>,
    /// With a response format: where the reply is in its grammar.
    pub(super) constraint: Option<super::constraint::Constraint>,
    /// With a response format: each step's token mask, in milliseconds.
    pub(super) mask_ms: Vec<f32>,
    /// With a response format and a pick on the backend: the step's mask (Constraint::allowed).
    pub(super) allowed: Option<Vec<u32>>,
    /// With `logprobs`: each sampled token's.
    pub(super) logprobs: Vec<TokenLogprob>,
}

impl Request {
    pub(super) fn new(seq: Sequence, prompt: &[u32], params: &SamplingParams, reused: usize, started: Instant) -> Self {
        Self {
            seq,
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
            wants_logits: false,
            unfed: None,
            finish: None,
            over: false,
            chat: None,
            constraint: None,
            mask_ms: Vec::new(),
            allowed: None,
            logprobs: Vec::new(),
        }
    }

    /// The request's sequence (its cached pages), for the caller to keep or release.
    pub fn into_sequence(self) -> Sequence {
        self.seq
    }

    /// Prompt tokens whose KV exists: reused from the cache or prefilled so far.
    pub fn prompt_done(&self) -> usize {
        self.seq.len().min(self.prompt.len())
    }

    /// The prompt's last logits, once its prefill is done (for a request that wants them).
    pub(super) fn take_logits(&mut self) -> Option<Vec<f32>> {
        match self.next.take() {
            Some(HeadOut::Logits(logits)) => Some(logits),
            _ => None,
        }
    }

    /// Text held back for a possible stop string or an unfinished character, released at the end.
    pub(super) fn flush_text(&mut self) -> String {
        if self.stops.stopped() {
            return String::new();
        }
        let (mut rest, stopped) = self.stops.push(&self.decoder.finish());
        if !stopped {
            rest.push_str(&self.stops.flush());
        }
        rest
    }

    pub(super) fn generation(&self) -> Generation {
        let prefilled = self.prompt_done().saturating_sub(self.reused + self.restored);
        let prefill_s = if self.prefill_s > 0.0 { self.prefill_s } else { self.started.elapsed().as_secs_f64() };
        let decode_s = self.first_token.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Generation {
            stats: GenerationStats {
                prompt_tokens: self.prompt.len(),
                reused_tokens: self.reused,
                restored_tokens: self.restored,
                prefilled_tokens: prefilled,
                generated_tokens: self.out.len(),
                ttft_ms: self.ttft_s.unwrap_or(prefill_s) * 1e3,
                prefill_tokens_per_s: prefilled as f64 / prefill_s.max(1e-9),
                decode_tokens_per_s: self.out.len().saturating_sub(1) as f64 / decode_s.max(1e-9),
                mask: super::MaskStats::of(&self.mask_ms),
            },
            tokens: self.out.clone(),
            top2_gaps: self.gaps.clone(),
            logprobs: self.logprobs.clone(),
            text: self.stops.text().to_string(),
            finish_reason: self.finish.unwrap_or(FinishReason::Aborted),
            hit_stop_string: self.stops.stopped(),
        }
    }
}
