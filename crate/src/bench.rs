//! Benchmarks shared by the CLI and, later, the browser. Each returns a report that prints
//! itself as a table and serialises to JSON.

use std::fmt;

use crate::engine::sampling::SamplingParams;
use crate::engine::{Engine, EngineError, Sequence};

/// Deterministic filler text for prompts of an exact token length.
const FILLER: &str = "The lighthouse keeper climbed the spiral stairs at dusk, trimmed the wick, \
polished the great lens, and wrote the wind, the sea state and every passing ship in the log. ";

/// The first `n` tokens of the filler text repeated.
pub fn prompt_of_len(engine: &Engine, n: usize) -> Result<Vec<u32>, EngineError> {
    let unit = engine.tokenizer.encode(FILLER, false)?;
    Ok(unit.iter().copied().cycle().take(n).collect())
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ThroughputReport {
    pub device: String,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub repeats: usize,
    /// Median prefill throughput over the repeats.
    pub prefill_tokens_per_s: f64,
    /// Median decode throughput over the repeats.
    pub decode_tokens_per_s: f64,
    pub prefill_runs_tokens_per_s: Vec<f64>,
    pub decode_runs_tokens_per_s: Vec<f64>,
}

/// Prefill throughput on a fresh `prefill_tokens`-token prompt, and decode throughput over
/// `decode_tokens` greedy steps after it; medians of `repeats` runs. Every run starts from an
/// empty sequence, so nothing is served from a cache.
pub async fn throughput(engine: &mut Engine, prefill_tokens: usize, decode_tokens: usize, repeats: usize) -> Result<ThroughputReport, EngineError> {
    let prompt = prompt_of_len(engine, prefill_tokens)?;
    let params = SamplingParams { max_tokens: decode_tokens, ignore_eos: true, ..SamplingParams::greedy(decode_tokens) };
    // One untimed run compiles pipelines and warms allocations.
    let mut seq = Sequence::default();
    engine.generate(&mut seq, &prompt[..prompt.len().min(16)], &SamplingParams { max_tokens: 2, ignore_eos: true, ..SamplingParams::greedy(2) }, |_| true).await?;
    engine.release(&mut seq);
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..repeats.max(1) {
        let mut seq = Sequence::default();
        let gen = engine.generate(&mut seq, &prompt, &params, |_| true).await?;
        engine.release(&mut seq);
        prefill.push(gen.stats.prefill_tokens_per_s);
        decode.push(gen.stats.decode_tokens_per_s);
    }
    Ok(ThroughputReport {
        device: format!("{} ({:?})", engine.gpu.info.name, engine.gpu.info.backend),
        prefill_tokens,
        decode_tokens,
        repeats: prefill.len(),
        prefill_tokens_per_s: median(&prefill),
        decode_tokens_per_s: median(&decode),
        prefill_runs_tokens_per_s: prefill,
        decode_runs_tokens_per_s: decode,
    })
}

impl fmt::Display for ThroughputReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device: {}", self.device)?;
        writeln!(f, "| phase   | tokens | tok/s (median of {}) |", self.repeats)?;
        writeln!(f, "|---------|--------|------------------|")?;
        writeln!(f, "| prefill | {:>6} | {:>16.1} |", self.prefill_tokens, self.prefill_tokens_per_s)?;
        write!(f, "| decode  | {:>6} | {:>16.1} |", self.decode_tokens, self.decode_tokens_per_s)
    }
}

/// Median of a non-empty sample (mean of the middle two for even sizes).
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// Linear-interpolated percentile of a non-empty sample.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}
