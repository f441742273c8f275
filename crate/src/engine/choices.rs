//! `n` choices of one request (OpenAI's `n`): the first prefills the prompt; once its last pass
//! is done the others fork from it (sharing its pages, a copy of its partial last page, its
//! last logits), so the prompt is computed once. The choices then decode one after another.

use web_time::Instant;

use super::request::{Request, Step};
use super::{Engine, EngineError, Generation, GenerationStats, MaskStats};

/// What one step of the choices did.
#[derive(Debug)]
pub enum ChoiceStep {
    Prefill { done: usize, total: usize },
    /// Choice `index` sampled a token (see [`Step::Token`]).
    Token { index: usize, token: u32, text: String },
    /// Choice `index` ended (its text held back until now in `tail`); the next one follows.
    ChoiceDone { index: usize, tail: String },
    /// The last choice ended: every choice's generation, in order.
    Done { generations: Vec<Generation>, tail: String },
}

/// A request's choices in flight. End them through `step` returning `Done` or an error, or
/// `Engine::abort_choices`, then release their sequences (`into_sequences`).
pub struct Choices {
    reqs: Vec<Request>,
    n: usize,
    /// The choice decoding now.
    at: usize,
    done: Vec<Generation>,
}

impl Choices {
    /// `n` (at least 1) choices of the request `first`.
    pub fn new(first: Request, n: usize) -> Self {
        Self { reqs: vec![first], n: n.max(1), at: 0, done: Vec::new() }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// The first choice, which prefills the prompt.
    pub fn first(&self) -> &Request {
        &self.reqs[0]
    }

    /// Choice `index`'s last sampled token's log-probabilities (when the request asked for them).
    pub fn last_logprob(&self, index: usize) -> Option<&super::sampling::TokenLogprob> {
        self.reqs.get(index)?.logprobs.last()
    }

    /// Every choice's sequence, for the caller to release.
    pub fn into_sequences(self) -> impl Iterator<Item = crate::kv::Sequence> {
        self.reqs.into_iter().map(Request::into_sequence)
    }
}

impl Engine {
    /// A second choice of `req`, whose prompt's last pass is done and nothing sampled yet:
    /// its pages shared, its partial page copied, its logits taken, its sampler seeded
    /// `index` further on.
    fn fork(&mut self, req: &mut Request, index: usize) -> Result<Request, EngineError> {
        let next = req.next.clone().ok_or(EngineError::Internal("a fork before the prompt's last pass"))?;
        let constraint = match &req.params.response_format {
            Some(format) => self.grammars()?.constraint(format)?,
            None => None,
        };
        self.cache.commit(&mut req.seq);
        let (seq, copies, evicted) = self.cache.fork(&req.seq)?;
        if let (Some(spill), false) = (&mut self.spill, evicted.is_empty()) {
            spill.capture(&mut self.backend, evicted);
        }
        self.backend.copy_pages(&copies);
        let mut params = req.params.clone();
        params.seed = params.seed.wrapping_add(index as u64);
        let mut twin = Request::new(seq, &req.prompt, &params, req.prompt.len(), Instant::now());
        twin.restore_checked = true;
        twin.next = Some(next);
        twin.constraint = constraint;
        twin.chat = req.chat.clone();
        Ok(twin)
    }

    /// Runs the choices' next step.
    pub async fn step_choices(&mut self, c: &mut Choices) -> Result<ChoiceStep, EngineError> {
        if c.at >= c.n {
            return Err(EngineError::RequestOver);
        }
        if c.reqs.len() < c.n && c.reqs[0].next.is_some() && c.reqs[0].out.is_empty() {
            for index in c.reqs.len()..c.n {
                let twin = self.fork(&mut c.reqs[0], index);
                match twin {
                    Ok(twin) => c.reqs.push(twin),
                    Err(e) => {
                        self.abort_choices(c);
                        return Err(e);
                    }
                }
            }
        }
        let index = c.at;
        let step = self.step(&mut c.reqs[index]).await;
        if step.is_err() {
            self.abort_choices(c);
        }
        Ok(match step? {
            Step::Prefill { done, total } => ChoiceStep::Prefill { done, total },
            Step::Token { token, text } => ChoiceStep::Token { index, token, text },
            Step::Done { generation, tail } => {
                c.done.push(generation);
                if index + 1 < c.n {
                    c.at += 1;
                    ChoiceStep::ChoiceDone { index, tail }
                } else {
                    ChoiceStep::Done { generations: c.done.clone(), tail }
                }
            }
        })
    }

    /// Ends every choice now, keeping what they computed in the cache; the generations of the
    /// choices that ended and of the one running (those not started are absent).
    pub fn abort_choices(&mut self, c: &mut Choices) -> Vec<Generation> {
        let at = c.at;
        for (i, req) in c.reqs.iter_mut().enumerate().skip(at) {
            let g = self.abort(req);
            if i == at {
                c.done.push(g);
            }
        }
        c.at = c.n;
        c.done.clone()
    }
}

/// One request's figures over its choices: the prompt's from the first choice (which computed
/// it), the generated tokens summed, decoding's rate over every choice's decoding, and the
/// worst choice's mask figures.
pub fn merged_stats(generations: &[Generation]) -> Option<GenerationStats> {
    let mut stats = generations.first()?.stats.clone();
    let decoded: Vec<(f64, f64)> = generations
        .iter()
        .map(|g| {
            let steps = g.stats.generated_tokens.saturating_sub(1) as f64;
            (steps, if g.stats.decode_tokens_per_s > 0.0 { steps / g.stats.decode_tokens_per_s } else { 0.0 })
        })
        .collect();
    stats.generated_tokens = generations.iter().map(|g| g.stats.generated_tokens).sum();
    stats.decode_tokens_per_s = decoded.iter().map(|d| d.0).sum::<f64>() / decoded.iter().map(|d| d.1).sum::<f64>().max(1e-9);
    let masks: Vec<&MaskStats> = generations.iter().filter_map(|g| g.stats.mask.as_ref()).collect();
    stats.mask = masks.iter().copied().cloned().reduce(|a, b| MaskStats {
        steps: a.steps + b.steps,
        mean_ms: (a.mean_ms * a.steps as f64 + b.mean_ms * b.steps as f64) / (a.steps + b.steps).max(1) as f64,
        median_ms: a.median_ms.max(b.median_ms),
        p99_ms: a.p99_ms.max(b.p99_ms),
        max_ms: a.max_ms.max(b.max_ms),
    });
    Some(stats)
}
