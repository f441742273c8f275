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
/// empty cache, so the whole prompt is prefilled each time.
pub async fn throughput(engine: &mut Engine, prefill_tokens: usize, decode_tokens: usize, repeats: usize) -> Result<ThroughputReport, EngineError> {
    let prompt = prompt_of_len(engine, prefill_tokens)?;
    let params = SamplingParams { max_tokens: decode_tokens, ignore_eos: true, ..SamplingParams::greedy(decode_tokens) };
    // One untimed run compiles pipelines and warms allocations.
    let mut seq = Sequence::default();
    engine.generate(&mut seq, &prompt[..prompt.len().min(16)], &SamplingParams { max_tokens: 2, ignore_eos: true, ..SamplingParams::greedy(2) }, |_| true).await?;
    engine.release(&mut seq);
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..repeats.max(1) {
        engine.clear_cache();
        let mut seq = Sequence::default();
        let gen = engine.generate(&mut seq, &prompt, &params, |_| true).await?;
        engine.release(&mut seq);
        assert_eq!(gen.stats.prefilled_tokens, prompt.len(), "a throughput run must prefill its whole prompt");
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

/// A question that depends on the document before it, so its answer changes without one.
const QUESTION: &str = "\nQuestion: what did the keeper write in the log each evening, and why? Answer:";

/// Settings of the prefix-cache benchmark.
#[derive(Debug, Clone)]
pub struct PrefixBenchConfig {
    pub prefix_lens: Vec<usize>,
    pub delta: usize,
    pub repeats: usize,
    /// Greedy tokens compared between cold, warm and control runs.
    pub check_tokens: usize,
}

impl Default for PrefixBenchConfig {
    fn default() -> Self {
        Self { prefix_lens: vec![128, 512, 1024], delta: 32, repeats: 5, check_tokens: 32 }
    }
}

/// One prefix length's results. Figures are present only when every control passed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PrefixRow {
    pub prefix_len: usize,
    pub delta: usize,
    pub cold_ttft_ms: Vec<f64>,
    pub warm_ttft_ms: Vec<f64>,
    pub cold_prefilled: usize,
    pub warm_prefilled: usize,
    pub warm_reused: usize,
    /// Which correctness control failed, if any; a failed row reports no speedup.
    pub failed_control: Option<String>,
    pub cold_median_ms: f64,
    pub cold_p95_ms: f64,
    pub warm_median_ms: f64,
    pub warm_p95_ms: f64,
    pub speedup: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PrefixReport {
    pub device: String,
    pub page_size: usize,
    pub repeats: usize,
    pub check_tokens: usize,
    pub rows: Vec<PrefixRow>,
}

impl PrefixReport {
    pub fn all_controls_passed(&self) -> bool {
        self.rows.iter().all(|r| r.failed_control.is_none())
    }
}

/// The prefix-cache benchmark (DESIGN.md, "The benchmark protocol"). For each prefix length P:
/// cold = empty cache, prefix + suffix; warm = the prefix run once untimed, then prefix + suffix;
/// control = the suffix alone. Cold and warm TTFTs are measured in interleaved repeats.
/// Correctness is part of the measurement: warm's greedy tokens must equal cold's, and must
/// differ from the control's (a cache that dropped the prefix would answer like the control);
/// every timed warm run's first token must equal cold's. A failed control voids the row.
pub async fn prefix(engine: &mut Engine, cfg: &PrefixBenchConfig) -> Result<PrefixReport, EngineError> {
    let question = engine.tokenizer.encode(QUESTION, false)?;
    let suffix: Vec<u32> = question.iter().copied().cycle().take(cfg.delta).collect();
    let greedy = |n| SamplingParams { ignore_eos: true, ..SamplingParams::greedy(n) };
    let mut rows = Vec::new();
    for &p in &cfg.prefix_lens {
        let prefix = prompt_of_len(engine, p)?;
        let prompt: Vec<u32> = prefix.iter().chain(&suffix).copied().collect();

        let cold = run(engine, None, &prompt, &greedy(cfg.check_tokens)).await?;
        let warm = run(engine, Some(&prefix), &prompt, &greedy(cfg.check_tokens)).await?;
        let control = run(engine, None, &suffix, &greedy(cfg.check_tokens)).await?;
        let mut failed = None;
        if warm.tokens != cold.tokens {
            failed = Some(format!("warm greedy {} tokens differ from cold", cfg.check_tokens));
        } else if warm.tokens == control.tokens {
            failed = Some("warm greedy tokens equal the suffix-alone control (prefix context lost)".to_string());
        }

        let (mut cold_ms, mut warm_ms) = (Vec::new(), Vec::new());
        for _ in 0..cfg.repeats.max(1) {
            let c = run(engine, None, &prompt, &greedy(1)).await?;
            let w = run(engine, Some(&prefix), &prompt, &greedy(1)).await?;
            if failed.is_none() && (c.tokens[0] != cold.tokens[0] || w.tokens[0] != cold.tokens[0]) {
                failed = Some("a timed run's first token differs from cold's".to_string());
            }
            cold_ms.push(c.stats.ttft_ms);
            warm_ms.push(w.stats.ttft_ms);
        }
        let ok = failed.is_none();
        rows.push(PrefixRow {
            prefix_len: p,
            delta: cfg.delta,
            cold_prefilled: cold.stats.prefilled_tokens,
            warm_prefilled: warm.stats.prefilled_tokens,
            warm_reused: warm.stats.reused_tokens,
            failed_control: failed,
            cold_median_ms: median(&cold_ms),
            cold_p95_ms: percentile(&cold_ms, 95.0),
            warm_median_ms: median(&warm_ms),
            warm_p95_ms: percentile(&warm_ms, 95.0),
            speedup: ok.then(|| median(&cold_ms) / median(&warm_ms)),
            cold_ttft_ms: cold_ms,
            warm_ttft_ms: warm_ms,
        });
        engine.clear_cache();
    }
    Ok(PrefixReport {
        device: format!("{} ({:?})", engine.gpu.info.name, engine.gpu.info.backend),
        page_size: engine.cache_stats().page_size,
        repeats: cfg.repeats.max(1),
        check_tokens: cfg.check_tokens,
        rows,
    })
}

/// One request from an empty cache, after caching `warm_with` (untimed) when given.
async fn run(engine: &mut Engine, warm_with: Option<&[u32]>, prompt: &[u32], params: &SamplingParams) -> Result<crate::engine::Generation, EngineError> {
    engine.clear_cache();
    if let Some(prefix) = warm_with {
        let mut seq = Sequence::default();
        let r = engine.logits(&mut seq, prefix).await;
        engine.release(&mut seq);
        r?;
    }
    let mut seq = Sequence::default();
    let g = engine.generate(&mut seq, prompt, params, |_| true).await;
    engine.release(&mut seq);
    g
}

impl fmt::Display for PrefixReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device: {} | page size {} | {} repeats | controls over {} greedy tokens", self.device, self.page_size, self.repeats, self.check_tokens)?;
        writeln!(f, "| prefix | delta | cold TTFT ms (median / p95) | warm TTFT ms (median / p95) | speedup | prefilled cold / warm | controls |")?;
        writeln!(f, "|-------:|------:|----------------------------:|----------------------------:|--------:|----------------------:|----------|")?;
        for r in &self.rows {
            let speedup = r.speedup.map_or("—".to_string(), |s| format!("{s:.1}x"));
            let controls = r.failed_control.as_deref().map_or("pass".to_string(), |c| format!("FAIL: {c}"));
            writeln!(
                f,
                "| {:>6} | {:>5} | {:>12.0} / {:>12.0} | {:>12.0} / {:>12.0} | {:>7} | {:>10} / {:>9} | {} |",
                r.prefix_len, r.delta, r.cold_median_ms, r.cold_p95_ms, r.warm_median_ms, r.warm_p95_ms, speedup, r.cold_prefilled, r.warm_prefilled, controls
            )?;
        }
        Ok(())
    }
}
