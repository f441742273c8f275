//! Time to first token of a request whose long tool definitions are already cached, beside the
//! same request without tools. The cache is set up as an app leaves it: an earlier conversation
//! with the same tools (or, without tools, the same system prompt) answered another question.
//! Both requests are greedy; the tool request takes `tool_choice: "auto"`, so its time includes
//! compiling the tools' grammar and masking its first token.
//!
//! Controls, part of every figure: the warm tool request's greedy tokens equal a cold run's; its
//! cached tokens cover the tools' pages (what two tool requests share, in whole pages); and its
//! tokens differ from the request's without tools (a cache that lost the tools would answer as
//! that one does).

use std::fmt;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{json, Value};

use super::median;
use crate::api::RequestFields;
use crate::engine::{Engine, EngineError, Generation, Sequence};

#[derive(Deserialize)]
struct ToolsProtocol {
    system: String,
    /// What the earlier conversation asked.
    warm_question: String,
    questions: Vec<String>,
    tools: Value,
}

/// The benchmark's texts and tools; a unit test parses them, so this cannot fail at run time.
static PROTOCOL: LazyLock<ToolsProtocol> =
    LazyLock::new(|| serde_json::from_str(include_str!("../bench_tools.json")).unwrap_or_else(|e| panic!("bench_tools.json: {e}")));

/// One question's figures (TTFT medians over the repeats, in milliseconds).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolsRow {
    pub question: String,
    pub prompt_tokens: usize,
    pub prompt_tokens_without_tools: usize,
    /// Prompt tokens the warm tool request reused.
    pub cached_tokens: usize,
    pub warm_ms: f64,
    pub without_tools_ms: f64,
    pub cold_ms: f64,
    /// warm / without tools.
    pub ratio: f64,
    pub failed_control: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolsReport {
    pub device: String,
    pub tools: usize,
    /// Tokens the tool requests share (the tools and the system prompt), and of those the whole pages.
    pub shared_tokens: usize,
    pub shared_page_tokens: usize,
    pub repeats: usize,
    pub rows: Vec<ToolsRow>,
    /// Over every question and repeat.
    pub warm_median_ms: f64,
    pub without_tools_median_ms: f64,
    /// The worst question's ratio: the goal is per request (pooled medians compare different
    /// questions' times and can hide it).
    pub worst_ratio: f64,
}

impl ToolsReport {
    pub fn failed_control(&self) -> Option<(&str, &str)> {
        self.rows.iter().find_map(|r| r.failed_control.as_deref().map(|c| (r.question.as_str(), c)))
    }
}

/// A chat request's prompt and sampling, as the package's request would make them.
fn request(engine: &Engine, question: &str, tools: bool, max_tokens: usize) -> Result<(Vec<u32>, crate::engine::sampling::SamplingParams), EngineError> {
    let mut body = json!({
        "messages": [{ "role": "system", "content": PROTOCOL.system }, { "role": "user", "content": question }],
        "temperature": 0,
        "max_tokens": max_tokens,
    });
    if tools {
        body["tools"] = PROTOCOL.tools.clone();
        body["tool_choice"] = "auto".into();
    }
    let fields: RequestFields = serde_json::from_value(body).map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
    let (chat, _) = fields.conversation(engine.tool_dialect()).map_err(EngineError::InvalidRequest)?;
    let sampling = fields.sampling(engine.cfg.vocab_size, engine.tool_dialect(), || 0).map_err(EngineError::InvalidRequest)?;
    Ok((engine.chat_tokens(&chat)?, sampling.params))
}

async fn run(engine: &mut Engine, question: &str, tools: bool, max_tokens: usize) -> Result<Generation, EngineError> {
    let (prompt, params) = request(engine, question, tools, max_tokens)?;
    let mut seq = Sequence::default();
    let generation = engine.generate(&mut seq, &prompt, &params, |_| true).await;
    engine.release(&mut seq);
    generation
}

/// The cache as an app leaves it (an earlier conversation, with or without the tools), then the request.
async fn after_warm_up(engine: &mut Engine, question: &str, tools: bool, max_tokens: usize) -> Result<Generation, EngineError> {
    engine.clear_cache();
    run(engine, &PROTOCOL.warm_question, tools, 1).await?;
    run(engine, question, tools, max_tokens).await
}

pub async fn tools(engine: &mut Engine, repeats: usize, check_tokens: usize) -> Result<ToolsReport, EngineError> {
    let page = engine.cache_stats().page_size;
    let a = request(engine, &PROTOCOL.questions[0], true, 1)?.0;
    let b = request(engine, &PROTOCOL.warm_question, true, 1)?.0;
    let shared_tokens = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let shared_page_tokens = shared_tokens / page * page;
    let (mut all_warm, mut all_without) = (Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for question in &PROTOCOL.questions {
        let warm = after_warm_up(engine, question, true, check_tokens).await?;
        let without = after_warm_up(engine, question, false, check_tokens).await?;
        engine.clear_cache();
        let cold = run(engine, question, true, check_tokens).await?;
        let mut failed = None;
        if warm.tokens != cold.tokens {
            failed = Some(format!("warm greedy {check_tokens} tokens differ from cold"));
        } else if warm.stats.reused_tokens < shared_page_tokens {
            failed = Some(format!("the warm request reused {} tokens, short of the tools' {shared_page_tokens}", warm.stats.reused_tokens));
        } else if warm.tokens == without.tokens {
            failed = Some("the tool request answered as the request without tools (the tools lost)".to_string());
        }
        let (mut warm_ms, mut without_ms, mut cold_ms) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeats.max(1) {
            warm_ms.push(after_warm_up(engine, question, true, 1).await?.stats.ttft_ms);
            without_ms.push(after_warm_up(engine, question, false, 1).await?.stats.ttft_ms);
            engine.clear_cache();
            cold_ms.push(run(engine, question, true, 1).await?.stats.ttft_ms);
        }
        all_warm.extend(&warm_ms);
        all_without.extend(&without_ms);
        rows.push(ToolsRow {
            question: question.clone(),
            prompt_tokens: warm.stats.prompt_tokens,
            prompt_tokens_without_tools: without.stats.prompt_tokens,
            cached_tokens: warm.stats.reused_tokens,
            warm_ms: median(&warm_ms),
            without_tools_ms: median(&without_ms),
            cold_ms: median(&cold_ms),
            ratio: median(&warm_ms) / median(&without_ms),
            failed_control: failed,
        });
    }
    engine.clear_cache();
    Ok(ToolsReport {
        device: engine.backend_info().describe(),
        tools: PROTOCOL.tools.as_array().map_or(0, Vec::len),
        shared_tokens,
        shared_page_tokens,
        repeats: repeats.max(1),
        warm_median_ms: median(&all_warm),
        without_tools_median_ms: median(&all_without),
        worst_ratio: rows.iter().map(|r| r.ratio).fold(0.0, f64::max),
        rows,
    })
}

impl fmt::Display for ToolsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "TTFT with {} cached tool definitions ({} shared tokens, {} in whole pages) vs without tools, {}; medians of {} repeats", self.tools, self.shared_tokens, self.shared_page_tokens, self.device, self.repeats)?;
        writeln!(f, "| question | prompt (tools / none) | cached | warm with tools ms | without tools ms | ratio | cold with tools ms | controls |")?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|---:|---|")?;
        for r in &self.rows {
            let controls = r.failed_control.as_deref().unwrap_or("pass");
            writeln!(f, "| {} | {} / {} | {} | {:.1} | {:.1} | {:.2}× | {:.1} | {controls} |", r.question, r.prompt_tokens, r.prompt_tokens_without_tools, r.cached_tokens, r.warm_ms, r.without_tools_ms, r.ratio, r.cold_ms)?;
        }
        write!(
            f,
            "worst question's ratio {:.2}× (goal ≤ 1.5× for each request); medians over all questions: warm with tools {:.1} ms, without tools {:.1} ms",
            self.worst_ratio, self.warm_median_ms, self.without_tools_median_ms
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_protocol_parses() {
        assert!(super::PROTOCOL.tools.as_array().is_some_and(|t| t.len() >= 10));
        assert!(!super::PROTOCOL.questions.is_empty());
    }
}
