//! Token sampling: greedy, temperature, top-k and top-p (nucleus), deterministic per seed.

use crate::model::synthetic::SplitMix64;

/// How the next token is chosen. `temperature == 0` means greedy (argmax).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probabilities sum to at least `top_p` (1 = no limit).
    pub top_p: f32,
    pub seed: u64,
    pub max_tokens: usize,
    /// Generation stops when the text ends with one of these; the stop string is not returned.
    pub stop: Vec<String>,
    /// Never choose an end-of-sequence token, as llama.cpp's `ignore_eos` (benchmarks measure a
    /// fixed number of steps of ordinary text).
    pub ignore_eos: bool,
    /// What the reply must be (JSON, a schema's JSON, a grammar's or a regex's text); the
    /// grammar decides where it may end, whatever `ignore_eos` says.
    pub response_format: Option<super::constraint::ResponseFormat>,
    /// Repetition, frequency and presence penalties over the recent tokens.
    pub penalties: Penalties,
    /// Added to these tokens' logits before anything else (OpenAI's `logit_bias`).
    pub logit_bias: Vec<(u32, f32)>,
    /// Report each chosen token's log-probability with this many likeliest alternatives.
    pub logprobs: Option<usize>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            seed: 0,
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eos: false,
            response_format: None,
            penalties: Penalties::default(),
            logit_bias: Vec::new(),
            logprobs: None,
        }
    }
}

/// llama.cpp's penalties (`llama_sampler_penalties`) over the last `last_n` tokens of the prompt
/// and the reply: a logit of a token among them is divided by `repetition` (multiplied when it
/// is negative), then lowered by `frequency` per occurrence and by `presence` once.
#[derive(Debug, Clone, PartialEq)]
pub struct Penalties {
    /// 1 leaves logits alone; above 1 discourages repeats.
    pub repetition: f32,
    pub frequency: f32,
    pub presence: f32,
    /// How many recent tokens count (llama.cpp's default 64).
    pub last_n: usize,
}

impl Default for Penalties {
    fn default() -> Self {
        Self { repetition: 1.0, frequency: 0.0, presence: 0.0, last_n: 64 }
    }
}

impl Penalties {
    pub fn is_active(&self) -> bool {
        self.last_n > 0 && (self.repetition != 1.0 || self.frequency != 0.0 || self.presence != 0.0)
    }

    /// Penalises `logits` for the tokens in the last `last_n` of `history`.
    pub fn apply(&self, logits: &mut [f32], history: &[u32]) {
        if !self.is_active() {
            return;
        }
        let mut counts: std::collections::HashMap<u32, u32> = Default::default();
        for &t in &history[history.len().saturating_sub(self.last_n)..] {
            *counts.entry(t).or_default() += 1;
        }
        for (&token, &count) in &counts {
            let Some(l) = logits.get_mut(token as usize) else { continue };
            *l = if *l <= 0.0 { *l * self.repetition } else { *l / self.repetition };
            *l -= count as f32 * self.frequency + self.presence;
        }
    }
}

/// A chosen token's log-probability under the distribution it was drawn from (the logits after
/// biases, penalties and a response format's mask, before temperature), with the likeliest
/// tokens' (largest first, ties to the lower id).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    pub fn of(logits: &[f32], token: u32, top: usize) -> Self {
        let max = logits.iter().copied().filter(|l| l.is_finite()).fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().filter(|l| l.is_finite()).map(|&l| ((l - max) as f64).exp()).sum();
        let log_z = max + sum.ln() as f32;
        let logprob = |l: f32| if l.is_finite() { l - log_z } else { f32::NEG_INFINITY };
        let mut best: Vec<(u32, f32)> = logits.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, &l)| (i as u32, l)).collect();
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if top < best.len() && top > 0 {
            best.select_nth_unstable_by(top - 1, by_logit);
        }
        best.truncate(top);
        best.sort_by(by_logit);
        Self {
            token,
            logprob: logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| logprob(l)),
            top: best.into_iter().map(|(i, l)| (i, logprob(l))).collect(),
        }
    }
}

impl SamplingParams {
    pub fn greedy(max_tokens: usize) -> Self {
        Self { temperature: 0.0, max_tokens, ..Self::default() }
    }

    /// Whether the next token is the argmax (then the GPU picks it, reading back 16 bytes).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Whether a sampler can draw from the `max_k` largest logits alone (`Sampler::sample_sorted`):
    /// a temperature with a top-k of at most `max_k`.
    pub fn needs_at_most(&self, max_k: usize) -> bool {
        !self.is_greedy() && (1..=max_k).contains(&self.top_k)
    }

    /// Whether each step needs the whole logits on the host: to bias or penalise them, or for
    /// log-probabilities.
    pub fn needs_logits(&self) -> bool {
        self.penalties.is_active() || !self.logit_bias.is_empty() || self.logprobs.is_some()
    }

    /// Biases and penalties, in that order (`history`: the prompt and the reply so far).
    pub fn adjust(&self, logits: &mut [f32], history: &[u32]) {
        for &(token, bias) in &self.logit_bias {
            if let Some(l) = logits.get_mut(token as usize) {
                *l += bias;
            }
        }
        self.penalties.apply(logits, history);
    }
}

/// A greedy pick: the largest logit's id (none when no logit is finite) and its lead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Top2 {
    pub index: Option<u32>,
    pub best: f32,
    pub second: f32,
}

impl Top2 {
    /// The best logit's lead over the runner-up (infinite when there is no runner-up).
    pub fn gap(&self) -> f32 {
        self.best - self.second
    }
}

/// The largest logit and the runner-up among the ids `admits`; the lowest id wins a tie.
pub fn top2(logits: &[f32], admits: impl Fn(u32) -> bool) -> Top2 {
    let (mut index, mut best, mut second) = (None, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || !admits(i as u32) {
            continue;
        }
        if l > best || index.is_none() && l > f32::NEG_INFINITY {
            second = best;
            best = l;
            index = Some(i as u32);
        } else if l > second {
            second = l;
        }
    }
    Top2 { index, best, second }
}

/// A sampler holds the random state of one generation, so a seed reproduces a whole reply.
pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix64,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = SplitMix64(params.seed);
        Self { params, rng }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        // Candidates sorted by logit, cut by top-k, turned into probabilities, cut by top-p.
        let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        let k = if self.params.top_k == 0 { cand.len() } else { self.params.top_k.min(cand.len()) };
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(k);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        self.draw(&cand)
    }

    /// `sample` from candidates sorted by logit, largest first, that hold at least the `top_k`
    /// largest (with their ties broken by the lower id, as `sample` breaks them).
    pub fn sample_sorted(&mut self, cand: &[(u32, f32)]) -> Option<u32> {
        if cand.is_empty() {
            return None;
        }
        let k = if self.params.top_k == 0 { cand.len() } else { self.params.top_k.min(cand.len()) };
        Some(self.draw(&cand[..k]))
    }

    /// Temperature, then top-p, over non-empty candidates sorted largest first; then a draw.
    fn draw(&mut self, cand: &[(u32, f32)]) -> u32 {
        let max = cand[0].1;
        let t = self.params.temperature;
        let mut probs: Vec<f32> = cand.iter().map(|c| ((c.1 - max) / t).exp()).collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        let mut keep = probs.len();
        let mut acc = 0.0;
        for (i, p) in probs.iter().enumerate() {
            acc += p;
            if acc >= self.params.top_p {
                keep = i + 1;
                break;
            }
        }
        let total: f32 = probs[..keep].iter().sum();
        let mut r = self.rng.uniform() * total;
        for (c, p) in cand.iter().zip(&probs[..keep]) {
            if r < *p {
                return c.0;
            }
            r -= p;
        }
        cand[keep - 1].0
    }
}

/// Index of the largest logit; the lowest index wins a tie, as in llama.cpp.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        (0..100).map(|i| ((i * 37) % 100) as f32 / 10.0).collect()
    }

    #[test]
    fn greedy_is_argmax() {
        let l = logits();
        assert_eq!(Sampler::new(SamplingParams::greedy(1)).sample(&l), argmax(&l));
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn same_seed_same_tokens_other_seed_differs() {
        let l = logits();
        let p = |seed| SamplingParams { temperature: 1.5, top_k: 0, top_p: 1.0, seed, ..Default::default() };
        let run = |seed| {
            let mut s = Sampler::new(p(seed));
            (0..64).map(|_| s.sample(&l)).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn top_k_one_is_greedy_and_top_k_bounds_choices() {
        let l = logits();
        let mut s = Sampler::new(SamplingParams { temperature: 5.0, top_k: 1, seed: 1, ..Default::default() });
        assert!((0..32).all(|_| s.sample(&l) == argmax(&l)));
        let mut order: Vec<u32> = (0..100).collect();
        order.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]));
        let top5 = &order[..5];
        let mut s = Sampler::new(SamplingParams { temperature: 5.0, top_k: 5, top_p: 1.0, seed: 2, ..Default::default() });
        assert!((0..200).all(|_| top5.contains(&s.sample(&l))));
    }

    #[test]
    fn sampling_from_the_sorted_largest_logits_draws_as_from_all_of_them() {
        // What the GPU's top-k candidates give the sampler: the same tokens for the same seed.
        let l: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 5000) as f32 / 700.0).collect();
        let mut sorted: Vec<(u32, f32)> = l.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        sorted.truncate(64);
        for (top_k, top_p) in [(40, 0.95), (64, 1.0), (1, 1.0), (7, 0.5)] {
            let p = SamplingParams { temperature: 0.8, top_k, top_p, seed: 5, ..Default::default() };
            assert!(p.needs_at_most(64));
            let (mut all, mut top) = (Sampler::new(p.clone()), Sampler::new(p));
            let a: Vec<u32> = (0..100).map(|_| all.sample(&l)).collect();
            let b: Vec<u32> = (0..100).map(|_| top.sample_sorted(&sorted).unwrap()).collect();
            assert_eq!(a, b, "top_k {top_k}, top_p {top_p}");
        }
        assert!(!SamplingParams { temperature: 0.8, top_k: 0, ..Default::default() }.needs_at_most(64));
        assert!(!SamplingParams { temperature: 0.8, top_k: 65, ..Default::default() }.needs_at_most(64));
        assert!(!SamplingParams::greedy(1).needs_at_most(64));
    }

    #[test]
    fn penalties_follow_llama_cpp() {
        let p = Penalties { repetition: 2.0, frequency: 0.5, presence: 0.25, last_n: 4 };
        let mut l = vec![4.0, -4.0, 1.0, 3.0, 8.0];
        // Token 4 is outside the window; 0 occurs twice, 1 and 3 once.
        p.apply(&mut l, &[4, 0, 1, 0, 3]);
        assert_eq!(l, vec![4.0 / 2.0 - 1.0 - 0.25, -8.0 - 0.5 - 0.25, 1.0, 3.0 / 2.0 - 0.5 - 0.25, 8.0]);
        let off = Penalties::default();
        assert!(!off.is_active());
        let mut same = vec![1.0, 2.0];
        off.apply(&mut same, &[0, 1]);
        assert_eq!(same, vec![1.0, 2.0]);
    }

    #[test]
    fn logprobs_are_a_log_softmax_with_the_largest_first() {
        let l = vec![1.0f32, 3.0, f32::NEG_INFINITY, 3.0, 0.5];
        let lp = TokenLogprob::of(&l, 4, 3);
        let z: f32 = l.iter().filter(|x| x.is_finite()).map(|x| x.exp()).sum::<f32>().ln();
        assert!((lp.logprob - (0.5 - z)).abs() < 1e-6);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 0]);
        assert!((lp.top[0].1 - (3.0 - z)).abs() < 1e-6);
        assert_eq!(TokenLogprob::of(&l, 2, 0).logprob, f32::NEG_INFINITY);
        assert!(TokenLogprob::of(&l, 2, 0).top.is_empty());
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // One token holds ~88% of the mass: top_p 0.5 must always pick it.
        let mut l = vec![0.0f32; 10];
        l[4] = 4.0;
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.5, seed: 9, ..Default::default() });
        assert!((0..100).all(|_| s.sample(&l) == 4));
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, seed: 9, ..Default::default() });
        assert!((0..200).any(|_| s.sample(&l) != 4));
    }
}
