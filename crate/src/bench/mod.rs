//! Benchmarks shared by the CLI and the browser. Each returns a report that prints itself as a
//! table and serialises to JSON. `tools` times requests whose tool definitions are cached. The prefix benchmark's texts, lengths and near-tie rule are in
//! `bench_protocol.json`, which the browser benchmarks (playwright-tests/bench/) read too.

mod tools;

use std::fmt;
use std::sync::LazyLock;

pub use tools::{tools, ToolsReport, ToolsRow};

use crate::engine::sampling::SamplingParams;
use crate::engine::{Engine, EngineError, Generation, Sequence};
use crate::gpu::profile::OpRole;
use crate::gpu::Gpu;

/// The prefix benchmark's protocol, as `bench_protocol.json` states it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Protocol {
    /// Deterministic filler text for prompts of an exact token length.
    pub filler: String,
    /// A question that depends on the document before it, so its answer changes without one.
    pub question: String,
    pub prefix_lens: Vec<usize>,
    /// The lengths `--long` adds (slow on software GPUs).
    pub long_prefix_lens: Vec<usize>,
    pub delta: usize,
    pub repeats: usize,
    pub check_tokens: usize,
    /// Below this lead of the top logit over the runner-up (in logits) a step is a near tie: two
    /// numerically different but correct paths (restored KV is quantized) may pick either
    /// token, as in the comparisons with llama.cpp. A lost prefix parts from cold at decisive steps.
    pub near_tie: f32,
}

/// The protocol file is part of the source: a unit test parses it, so this cannot fail at run time.
pub static PROTOCOL: LazyLock<Protocol> =
    LazyLock::new(|| serde_json::from_str(include_str!("../bench_protocol.json")).unwrap_or_else(|e| panic!("bench_protocol.json: {e}")));

/// The first `n` tokens of the filler text repeated.
pub fn prompt_of_len(engine: &Engine, n: usize) -> Result<Vec<u32>, EngineError> {
    let unit = engine.tokenizer.encode(&PROTOCOL.filler, false)?;
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
        device: engine.backend_info().describe(),
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

/// Where a forward pass's GPU time goes: one run of a `prefill_tokens` prompt and
/// `decode_tokens` greedy steps with every op in its own timestamped pass (so the times add
/// the small cost of a pass boundary per op), and what a decoded token costs in dispatches
/// and in bytes read back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProfileReport {
    pub device: String,
    /// Prompt tokens reused from the cache; `prefill_tokens` were computed after them.
    pub reused_tokens: usize,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub n_layers: usize,
    /// Per op role, in pass order.
    pub ops: Vec<ProfileRow>,
    /// Over the decode passes (one token each), per pass.
    pub decode_gpu_us_per_token: f64,
    pub dispatches_per_token: f64,
    pub dispatches_per_layer_per_token: f64,
    pub read_back_bytes_per_token: f64,
    /// Over the prefill batches, in all.
    pub prefill_gpu_ms: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProfileRow {
    pub op: &'static str,
    pub decode_us_per_token: f64,
    pub decode_dispatches_per_token: f64,
    pub prefill_ms: f64,
}

/// With `cached_tokens`, the prompt's first `cached_tokens` are prefilled (and cached) before
/// the profiled run, which then computes only the rest over the cached pages: the warm path.
pub async fn profile(engine: &mut Engine, cached_tokens: usize, prefill_tokens: usize, decode_tokens: usize) -> Result<ProfileReport, EngineError> {
    let prompt = prompt_of_len(engine, cached_tokens + prefill_tokens)?;
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(decode_tokens) };
    engine.clear_cache();
    if cached_tokens > 0 {
        let mut seq = Sequence::default();
        let r = engine.logits(&mut seq, &prompt[..cached_tokens]).await;
        engine.release(&mut seq);
        r?;
    }
    engine.profile(true)?;
    let mut seq = Sequence::default();
    let mut req = engine.start(&mut seq, &prompt, &params)?;
    // Bytes read back from the first token on: the decode steps' traffic.
    let (mut tokens, mut bytes_from, mut reused_tokens) = (0usize, 0u64, 0usize);
    let result = loop {
        match engine.step(&mut req).await {
            Ok(crate::engine::Step::Token { .. }) => {
                tokens += 1;
                if tokens == 1 {
                    bytes_from = engine.bytes_read_back();
                }
            }
            Ok(crate::engine::Step::Prefill { .. }) => {}
            Ok(crate::engine::Step::Done { generation, .. }) => {
                reused_tokens = generation.stats.reused_tokens;
                break Ok(());
            }
            Err(e) => break Err(e),
        }
    };
    let read_back = engine.bytes_read_back() - bytes_from;
    engine.release(&mut req.into_sequence());
    let passes = engine.profile(false)?;
    result?;

    let n_layers = engine.cfg.n_layers;
    let decode = passes.iter().filter(|p| p.n_tokens == 1).collect::<Vec<_>>();
    let prefill = passes.iter().filter(|p| p.n_tokens > 1).collect::<Vec<_>>();
    let mut rows: Vec<ProfileRow> = Vec::new();
    let row = |rows: &mut Vec<ProfileRow>, role: OpRole| -> usize {
        match rows.iter().position(|r| r.op == role.name()) {
            Some(i) => i,
            None => {
                rows.push(ProfileRow { op: role.name(), decode_us_per_token: 0.0, decode_dispatches_per_token: 0.0, prefill_ms: 0.0 });
                rows.len() - 1
            }
        }
    };
    let per = |n: usize| 1.0 / n.max(1) as f64;
    let (mut layer_dispatches, mut dispatches) = (0.0, 0.0);
    for pass in &decode {
        for (op, ns) in &pass.ops {
            let i = row(&mut rows, op.role);
            rows[i].decode_us_per_token += ns / 1e3 * per(decode.len());
            rows[i].decode_dispatches_per_token += op.dispatches as f64 * per(decode.len());
            dispatches += op.dispatches as f64 * per(decode.len());
            if op.role.per_layer() {
                layer_dispatches += op.dispatches as f64 * per(decode.len());
            }
        }
    }
    for pass in &prefill {
        for (op, ns) in &pass.ops {
            let i = row(&mut rows, op.role);
            rows[i].prefill_ms += ns / 1e6;
        }
    }
    Ok(ProfileReport {
        device: engine.backend_info().describe(),
        reused_tokens,
        prefill_tokens: prompt.len() - reused_tokens,
        decode_tokens: tokens,
        n_layers,
        decode_gpu_us_per_token: rows.iter().map(|r| r.decode_us_per_token).sum(),
        dispatches_per_token: dispatches,
        dispatches_per_layer_per_token: layer_dispatches / n_layers.max(1) as f64,
        read_back_bytes_per_token: read_back as f64 / tokens.saturating_sub(1).max(1) as f64,
        prefill_gpu_ms: rows.iter().map(|r| r.prefill_ms).sum(),
        ops: rows,
    })
}

impl fmt::Display for ProfileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = if self.reused_tokens > 0 { format!(" over {} cached", self.reused_tokens) } else { String::new() };
        writeln!(f, "profile on {}: {} prompt tokens computed{cached}, then {} greedy tokens; each op in its own timestamped pass", self.device, self.prefill_tokens, self.decode_tokens)?;
        writeln!(
            f,
            "per decoded token: {:.0} dispatches ({:.1} per layer × {} layers, the rest once), {:.0} bytes read back, {:.0} µs of GPU time",
            self.dispatches_per_token, self.dispatches_per_layer_per_token, self.n_layers, self.read_back_bytes_per_token, self.decode_gpu_us_per_token
        )?;
        writeln!(f, "| op | decode µs/token | decode share | dispatches/token | prefill ms | prefill share |")?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|")?;
        let share = |x: f64, total: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
        for r in &self.ops {
            writeln!(
                f,
                "| {} | {:.1} | {:.1} % | {:.0} | {:.1} | {:.1} % |",
                r.op,
                r.decode_us_per_token,
                share(r.decode_us_per_token, self.decode_gpu_us_per_token),
                r.decode_dispatches_per_token,
                r.prefill_ms,
                share(r.prefill_ms, self.prefill_gpu_ms)
            )?;
        }
        write!(f, "| total | {:.1} | | {:.0} | {:.1} | |", self.decode_gpu_us_per_token, self.dispatches_per_token, self.prefill_gpu_ms)
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
        let p = &*PROTOCOL;
        Self { prefix_lens: p.prefix_lens.clone(), delta: p.delta, repeats: p.repeats, check_tokens: p.check_tokens }
    }
}

/// One prefix length's results. Figures are present only when every control passed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PrefixRow {
    pub prefix_len: usize,
    pub delta: usize,
    pub cold_ttft_ms: Vec<f64>,
    pub warm_ttft_ms: Vec<f64>,
    /// Warm with the spill tier detached, in the same run: what spilling costs a request.
    pub warm_no_spill_ttft_ms: Vec<f64>,
    /// Prefix spilled, GPU tier cleared, then prefix + suffix (empty without a spill store).
    pub restored_ttft_ms: Vec<f64>,
    /// Writing the prefix's pages to the spill store after it ran (off any request's path).
    pub write_behind_ms: Vec<f64>,
    pub cold_prefilled: usize,
    pub warm_prefilled: usize,
    pub warm_reused: usize,
    pub restored_tokens: usize,
    pub restored_prefilled: usize,
    /// How the restored run's greedy tokens compare with cold's (see [`Agreement`]).
    pub restored_agreement: Option<String>,
    /// Which correctness control failed, if any; a failed row reports no speedup.
    pub failed_control: Option<String>,
    pub cold_median_ms: f64,
    pub cold_p95_ms: f64,
    pub warm_median_ms: f64,
    pub warm_p95_ms: f64,
    pub warm_no_spill_median_ms: f64,
    pub restored_median_ms: Option<f64>,
    pub restored_p95_ms: Option<f64>,
    pub write_behind_median_ms: Option<f64>,
    pub speedup: Option<f64>,
    pub restored_speedup: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PrefixReport {
    pub device: String,
    pub page_size: usize,
    pub repeats: usize,
    pub check_tokens: usize,
    /// The spill format of the restored path, when a spill store is attached.
    pub spill: Option<crate::kv::spill::SpillFormat>,
    /// Bytes of one page on the GPU (f16) and as a spill record's payload.
    pub gpu_bytes_per_page: u64,
    pub spill_bytes_per_page: Option<usize>,
    pub rows: Vec<PrefixRow>,
}

impl PrefixReport {
    pub fn all_controls_passed(&self) -> bool {
        self.rows.iter().all(|r| r.failed_control.is_none())
    }
}

/// How a measured request finds the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CachePath {
    /// Both tiers empty.
    Cold,
    /// The prefix ran just before (then written behind, as after any request).
    Warm,
    /// The prefix ran and was written to the spill store, then the GPU tier was cleared.
    Restored,
}

/// The prefix-cache benchmark (DESIGN.md, "The benchmark protocol"). For each prefix length P:
/// cold = empty cache, prefix + suffix; warm = the prefix run once untimed, then prefix +
/// suffix; restored = the prefix spilled and the GPU tier cleared, then prefix + suffix (when
/// a spill store is attached); control = the suffix alone. TTFTs are measured in interleaved
/// repeats, warm also with the spill tier detached. Correctness is part of the measurement:
/// warm's greedy tokens must equal cold's, restored's too or part from them only at a near tie
/// ([`Protocol::near_tie`]: its KV is quantized), both must differ from the control's (a cache that
/// dropped the prefix would answer like the control), the restored path must have restored the
/// prefix, and every timed run's first token must equal cold's. A failed control voids the row.
pub async fn prefix(engine: &mut Engine, cfg: &PrefixBenchConfig) -> Result<PrefixReport, EngineError> {
    let question = engine.tokenizer.encode(&PROTOCOL.question, false)?;
    let suffix: Vec<u32> = question.iter().copied().cycle().take(cfg.delta).collect();
    let greedy = |n| SamplingParams { ignore_eos: true, ..SamplingParams::greedy(n) };
    let spill = engine.spill_stats().map(|s| s.format);
    let mut rows = Vec::new();
    for &p in &cfg.prefix_lens {
        let prefix = prompt_of_len(engine, p)?;
        let prompt: Vec<u32> = prefix.iter().chain(&suffix).copied().collect();
        let check = greedy(cfg.check_tokens);

        let cold = run(engine, CachePath::Cold, &prefix, &prompt, &check).await?.0;
        let warm = run(engine, CachePath::Warm, &prefix, &prompt, &check).await?.0;
        let restored = match spill {
            Some(_) => Some(run(engine, CachePath::Restored, &prefix, &prompt, &check).await?.0),
            None => None,
        };
        let control = run(engine, CachePath::Cold, &prefix, &suffix, &check).await?.0;
        let mut restored_agreement = None;
        let mut failed = None;
        let mut fail = |why: String| {
            failed.get_or_insert(why);
        };
        if warm.tokens != cold.tokens {
            fail(format!("warm greedy {} tokens differ from cold", cfg.check_tokens));
        }
        if warm.tokens == control.tokens {
            fail("warm greedy tokens equal the suffix-alone control (prefix context lost)".to_string());
        }
        if let Some(r) = &restored {
            let agreement = Agreement::of(&cold.tokens, &cold.top2_gaps, &r.tokens);
            restored_agreement = Some(agreement.to_string());
            if r.stats.restored_tokens == 0 {
                fail("the restored path restored nothing from the spill store".to_string());
            } else if !agreement.passes() {
                fail(format!("restored greedy tokens differ from cold: {agreement}"));
            } else if r.tokens == control.tokens {
                fail("restored greedy tokens equal the suffix-alone control (prefix context lost)".to_string());
            }
        }

        let (mut cold_ms, mut warm_ms, mut warm_off_ms, mut restored_ms, mut write_ms) = (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..cfg.repeats.max(1) {
            let c = run(engine, CachePath::Cold, &prefix, &prompt, &greedy(1)).await?.0;
            let w = run(engine, CachePath::Warm, &prefix, &prompt, &greedy(1)).await?.0;
            let tier = engine.detach_spill();
            let off = run(engine, CachePath::Warm, &prefix, &prompt, &greedy(1)).await;
            if let Some(tier) = tier {
                engine.reattach_spill(tier);
            }
            let off = off?.0;
            let mut firsts = vec![c.tokens[0], w.tokens[0], off.tokens[0]];
            if spill.is_some() {
                let (r, write) = run(engine, CachePath::Restored, &prefix, &prompt, &greedy(1)).await?;
                firsts.push(r.tokens[0]);
                restored_ms.push(r.stats.ttft_ms);
                write_ms.extend(write);
            }
            if firsts.iter().any(|&t| t != cold.tokens[0]) {
                fail("a timed run's first token differs from cold's".to_string());
            }
            cold_ms.push(c.stats.ttft_ms);
            warm_ms.push(w.stats.ttft_ms);
            warm_off_ms.push(off.stats.ttft_ms);
        }
        let ok = failed.is_none();
        let restored_median = (!restored_ms.is_empty()).then(|| median(&restored_ms));
        rows.push(PrefixRow {
            prefix_len: p,
            delta: cfg.delta,
            cold_prefilled: cold.stats.prefilled_tokens,
            warm_prefilled: warm.stats.prefilled_tokens,
            warm_reused: warm.stats.reused_tokens,
            restored_tokens: restored.as_ref().map_or(0, |r| r.stats.restored_tokens),
            restored_prefilled: restored.as_ref().map_or(0, |r| r.stats.prefilled_tokens),
            restored_agreement,
            failed_control: failed,
            cold_median_ms: median(&cold_ms),
            cold_p95_ms: percentile(&cold_ms, 95.0),
            warm_median_ms: median(&warm_ms),
            warm_p95_ms: percentile(&warm_ms, 95.0),
            warm_no_spill_median_ms: median(&warm_off_ms),
            restored_median_ms: restored_median,
            restored_p95_ms: (!restored_ms.is_empty()).then(|| percentile(&restored_ms, 95.0)),
            write_behind_median_ms: (!write_ms.is_empty()).then(|| median(&write_ms)),
            speedup: ok.then(|| median(&cold_ms) / median(&warm_ms)),
            restored_speedup: restored_median.filter(|_| ok).map(|r| median(&cold_ms) / r),
            cold_ttft_ms: cold_ms,
            warm_ttft_ms: warm_ms,
            warm_no_spill_ttft_ms: warm_off_ms,
            restored_ttft_ms: restored_ms,
            write_behind_ms: write_ms,
        });
        engine.clear_cache();
        engine.clear_spill().await;
    }
    Ok(PrefixReport {
        device: engine.backend_info().describe(),
        page_size: engine.cache_stats().page_size,
        repeats: cfg.repeats.max(1),
        check_tokens: cfg.check_tokens,
        spill,
        gpu_bytes_per_page: crate::kv::page_bytes(&engine.cfg, engine.cache_stats().page_size),
        spill_bytes_per_page: engine.spill_stats().map(|s| s.bytes_per_page),
        rows,
    })
}

/// How a run's greedy tokens compare with cold's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Agreement {
    Exact { tokens: usize },
    /// They first differ at step `at`, where cold's top-2 gap was `gap`.
    Differs { at: usize, tokens: usize, gap: f32 },
}

impl Agreement {
    pub fn of(cold: &[u32], cold_gaps: &[f32], other: &[u32]) -> Agreement {
        match cold.iter().zip(other).position(|(a, b)| a != b) {
            None if cold.len() == other.len() => Agreement::Exact { tokens: cold.len() },
            at => {
                let at = at.unwrap_or(cold.len().min(other.len()));
                Agreement::Differs { at, tokens: cold.len(), gap: cold_gaps.get(at).copied().unwrap_or(f32::INFINITY) }
            }
        }
    }

    /// Equal, or parted only at a near tie.
    pub fn passes(&self) -> bool {
        match *self {
            Agreement::Exact { .. } => true,
            Agreement::Differs { gap, .. } => gap < PROTOCOL.near_tie,
        }
    }
}

impl fmt::Display for Agreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Agreement::Exact { tokens } => write!(f, "{tokens}/{tokens} equal"),
            Agreement::Differs { at, tokens, gap } => {
                let kind = if gap < PROTOCOL.near_tie { "a near tie" } else { "a decisive step" };
                write!(f, "{at}/{tokens} equal, then {kind} (cold's top-2 gap {gap:.4})")
            }
        }
    }
}

/// One request on `prompt` after setting the cache up as `path` says (untimed), with the time
/// the restored path's write-behind took.
async fn run(engine: &mut Engine, path: CachePath, prefix: &[u32], prompt: &[u32], params: &SamplingParams) -> Result<(Generation, Option<f64>), EngineError> {
    engine.clear_cache();
    engine.clear_spill().await;
    let mut write_ms = None;
    if path != CachePath::Cold {
        let mut seq = Sequence::default();
        let r = engine.logits(&mut seq, prefix).await;
        engine.release(&mut seq);
        r?;
        let started = web_time::Instant::now();
        engine.write_behind().await;
        write_ms = Some(started.elapsed().as_secs_f64() * 1e3);
    }
    if path == CachePath::Restored {
        engine.clear_cache();
    }
    let mut seq = Sequence::default();
    let generation = engine.generate(&mut seq, prompt, params, |_| true).await;
    engine.release(&mut seq);
    Ok((generation?, write_ms.filter(|_| path == CachePath::Restored)))
}

impl fmt::Display for PrefixReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spill = match (self.spill, self.spill_bytes_per_page) {
            (Some(s), Some(b)) => format!("spill {s:?}, {b} bytes per page against {} on the GPU", self.gpu_bytes_per_page),
            _ => "no spill store".to_string(),
        };
        writeln!(f, "device: {} | page size {} | {} repeats | controls over {} greedy tokens | {spill}", self.device, self.page_size, self.repeats, self.check_tokens)?;
        writeln!(f, "TTFT in ms, median / p95; warm without spilling is the same warm path with the spill tier detached")?;
        writeln!(f, "| prefix | delta | cold | warm | warm, no spill | restored | warm speedup | restored speedup | write-behind ms | prefilled cold / warm / restored | restored tokens | restored vs cold | controls |")?;
        writeln!(f, "|-------:|------:|-----:|-----:|---------------:|---------:|-------------:|-----------------:|----------------:|---------------------------------:|----------------:|------------------|----------|")?;
        let opt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
        let times = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1}x"));
        for r in &self.rows {
            let controls = r.failed_control.as_deref().map_or("pass".to_string(), |c| format!("FAIL: {c}"));
            writeln!(
                f,
                "| {} | {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} | {} / {} | {} | {} | {} | {} / {} / {} | {} | {} | {} |",
                r.prefix_len, r.delta, r.cold_median_ms, r.cold_p95_ms, r.warm_median_ms, r.warm_p95_ms, r.warm_no_spill_median_ms,
                opt(r.restored_median_ms), opt(r.restored_p95_ms), times(r.speedup), times(r.restored_speedup), opt(r.write_behind_median_ms),
                r.cold_prefilled, r.warm_prefilled, r.restored_prefilled, r.restored_tokens, r.restored_agreement.as_deref().unwrap_or("—"), controls
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_file_parses_and_is_sane() {
        let p = &*PROTOCOL;
        assert!(!p.filler.is_empty() && !p.question.is_empty());
        assert!(p.prefix_lens.iter().chain(&p.long_prefix_lens).all(|&n| n > 0));
        assert!(p.delta > 0 && p.repeats >= 5 && p.check_tokens > 0);
        assert!(p.near_tie > 0.0 && p.near_tie < 1.0);
    }

    #[test]
    fn agreement_allows_a_first_difference_only_at_a_near_tie() {
        let cold = [1, 2, 3, 4];
        let gaps = [2.0, 0.01, 3.0, 1.0];
        assert!(Agreement::of(&cold, &gaps, &[1, 2, 3, 4]).passes());
        let tie = Agreement::of(&cold, &gaps, &[1, 9, 9, 9]);
        assert_eq!(tie, Agreement::Differs { at: 1, tokens: 4, gap: 0.01 });
        assert!(tie.passes());
        assert!(!Agreement::of(&cold, &gaps, &[1, 2, 9, 4]).passes(), "parted at a decisive step");
        assert!(!Agreement::of(&cold, &gaps, &[9, 2, 3, 4]).passes());
        assert!(!Agreement::of(&cold, &gaps, &[1, 2, 3]).passes(), "a shorter run parts where it ends");
        assert_eq!(Agreement::of(&cold, &gaps, &[1, 9]).to_string(), "1/4 equal, then a near tie (cold's top-2 gap 0.0100)");
    }
}

/// GPU memory bandwidth as a buffer-to-buffer copy sees it: the bound a memory-bound decode is
/// measured against (weight bytes per token ÷ this).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BandwidthReport {
    pub device: String,
    /// Bytes of each copy, and copies per timed submit.
    pub bytes: u64,
    pub copies: usize,
    pub repeats: usize,
    /// Median over the repeats of bytes read plus bytes written per second, in GB/s (1e9).
    pub copy_gb_per_s: f64,
}

impl fmt::Display for BandwidthReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device: {} | copy bandwidth {:.1} GB/s (read + write; {} copies of {} MiB a submit, median of {})",
            self.device,
            self.copy_gb_per_s,
            self.copies,
            self.bytes >> 20,
            self.repeats
        )
    }
}

/// Times `copies` buffer-to-buffer copies of `bytes` (at most the adapter's largest buffer) per
/// submit, after one untimed submit, `repeats` times.
pub async fn copy_bandwidth(gpu: &Gpu, bytes: u64, copies: usize, repeats: usize) -> Result<BandwidthReport, EngineError> {
    let bytes = bytes.min(gpu.limits.max_buffer_size).max(4) & !3;
    let copies = copies.max(1);
    let src = gpu.storage("bandwidth.src", bytes);
    let dst = gpu.storage("bandwidth.dst", bytes);
    let mut runs = Vec::with_capacity(repeats);
    for run in 0..=repeats {
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("bandwidth") });
        for i in 0..copies {
            // Alternate directions so no copy can be skipped as a repeat of the last.
            let (from, to) = if i % 2 == 0 { (&src, &dst) } else { (&dst, &src) };
            enc.copy_buffer_to_buffer(from, 0, to, 0, bytes);
        }
        let started = web_time::Instant::now();
        gpu.queue.submit([enc.finish()]);
        crate::gpu::readback::work_done(gpu).await?;
        gpu.check()?;
        let secs = started.elapsed().as_secs_f64();
        if run > 0 {
            runs.push(2.0 * bytes as f64 * copies as f64 / secs / 1e9);
        }
    }
    Ok(BandwidthReport { device: format!("{} ({:?})", gpu.info.name, gpu.info.backend), bytes, copies, repeats, copy_gb_per_s: median(&runs) })
}
