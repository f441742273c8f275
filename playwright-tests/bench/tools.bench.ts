// `radixlm bench tools` in the browser: time to first token of chat requests carrying 12 tool
// definitions (crate/src/bench_tools.json, ~1,800 tokens) after an earlier conversation with the
// same tools left them cached, beside the same requests without tools after an earlier
// conversation with the same system prompt; greedy, `tool_choice: "auto"`. Controls, part of
// every figure: the warm tool request's 16 greedy tokens equal a cold run's, its cached tokens
// cover the tools' whole pages (what `cache.pin` of the tools and system prompt pins), and its
// tokens differ from the request's without tools. Goal: warm with tools at most 1.5× without.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts tools   (RADIXLM_BENCH_REPEATS=N: N repeats, 5 by default)
//
// Prints a table and writes results/tools.md and .json (RADIXLM_BENCH_OUT elsewhere).

import { readFileSync } from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import type { ChatCompletion, ChatMessageParam, Engine, FunctionTool } from "../../pkg/src/index.js";
import { REPO_ROOT } from "../paths";
import { benchThreads, describe, RadixlmEngine, runEnvironment } from "./engines";
import { benchRepeats, median, writeResults } from "./protocol";

interface ToolsProtocol {
  system: string;
  warm_question: string;
  questions: string[];
  tools: FunctionTool[];
}

const PROTOCOL: ToolsProtocol = JSON.parse(readFileSync(path.join(REPO_ROOT, "crate", "src", "bench_tools.json"), "utf8"));
const REPEATS = benchRepeats(5);
const CHECK_TOKENS = 16;
const GOAL = 1.5;

interface Run {
  tokens: number[];
  ttftMs: number;
  promptTokens: number;
  cachedTokens: number;
}


test("tools: TTFT with cached tool definitions beside the same requests without tools", async ({ context }) => {
  test.setTimeout(1_800_000);
  const env = await runEnvironment(context);
  const page = await context.newPage();
  const engine = new RadixlmEngine(page, "cpu", benchThreads());
  await engine.open();

  /** One request after the cache is set up: cleared, then (unless cold) an earlier conversation. */
  const run = (question: string, tools: boolean, maxTokens: number, cold = false): Promise<Run> =>
    page.evaluate(
      async ({ p, question, tools, maxTokens, cold }) => {
        const rx = (window as unknown as { benchEngine: Engine }).benchEngine;
        const ask = (q: string, n: number): Promise<ChatCompletion> => {
          const messages: ChatMessageParam[] = [{ role: "system", content: p.system }, { role: "user", content: q }];
          return rx.chat.completions.create({ messages, temperature: 0, max_tokens: n, ...(tools ? { tools: p.tools, tool_choice: "auto" as const } : {}) });
        };
        await rx.cache.clear();
        if (!cold) await ask(p.warm_question, 1);
        const r = await ask(question, maxTokens);
        return { tokens: r.tokens, ttftMs: r.stats.ttft_ms, promptTokens: r.usage.prompt_tokens, cachedTokens: r.usage.prompt_tokens_details.cached_tokens };
      },
      { p: PROTOCOL, question, tools, maxTokens, cold },
    );

  const shared = await page.evaluate(async (p) => {
    const rx = (window as unknown as { benchEngine: Engine }).benchEngine;
    await rx.cache.clear();
    const pinned = await rx.cache.pin({ tools: p.tools, messages: [{ role: "system", content: p.system }] });
    await rx.cache.clear();
    return pinned;
  }, PROTOCOL);

  const rows = [];
  const allWarm: number[] = [];
  const allWithout: number[] = [];
  for (const question of PROTOCOL.questions) {
    const warm = await run(question, true, CHECK_TOKENS);
    const without = await run(question, false, CHECK_TOKENS);
    const cold = await run(question, true, CHECK_TOKENS, true);
    let failed: string | null = null;
    if (JSON.stringify(warm.tokens) !== JSON.stringify(cold.tokens)) failed = `warm greedy ${CHECK_TOKENS} tokens differ from cold`;
    else if (warm.cachedTokens < shared) failed = `the warm request reused ${warm.cachedTokens} tokens, short of the tools' ${shared}`;
    else if (JSON.stringify(warm.tokens) === JSON.stringify(without.tokens)) failed = "the tool request answered as the request without tools";
    const warmMs: number[] = [];
    const withoutMs: number[] = [];
    for (let i = 0; i < REPEATS; i++) {
      warmMs.push((await run(question, true, 1)).ttftMs);
      withoutMs.push((await run(question, false, 1)).ttftMs);
    }
    allWarm.push(...warmMs);
    allWithout.push(...withoutMs);
    rows.push({ question, promptTokens: warm.promptTokens, promptTokensWithout: without.promptTokens, cachedTokens: warm.cachedTokens, warmMs: median(warmMs), withoutMs: median(withoutMs), coldMs: cold.ttftMs, failed });
  }
  await engine.close();
  for (const r of rows) expect(r.failed, r.question).toBeNull();

  // The goal is per request: pooled medians compare different questions' times and can hide it.
  const worstRatio = Math.max(...rows.map((r) => r.warmMs / r.withoutMs));
  const f = (x: number) => x.toFixed(1);
  const lines = [
    `# TTFT with ${PROTOCOL.tools.length} cached tool definitions vs without tools (radixlm CPU backend, ${engine.threads} thread${engine.threads === 1 ? "" : "s"})`,
    "",
    `The tools and system prompt pin ${shared} tokens in whole pages. Medians of ${REPEATS} repeats; cold: one run.`,
    "",
    "| question | prompt (tools / none) | cached | warm with tools ms | without tools ms | ratio | cold with tools ms | controls |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
    ...rows.map((r) => `| ${r.question} | ${r.promptTokens} / ${r.promptTokensWithout} | ${r.cachedTokens} | ${f(r.warmMs)} | ${f(r.withoutMs)} | ${(r.warmMs / r.withoutMs).toFixed(2)}× | ${f(r.coldMs)} | ${r.failed ?? "pass"} |`),
    "",
    `Worst question's ratio ${worstRatio.toFixed(2)}× (goal ≤ ${GOAL}× for each request); medians over all questions: warm with tools ${f(median(allWarm))} ms, without tools ${f(median(allWithout))} ms.`,
    "",
    describe(env),
  ];
  writeResults("tools", lines.join("\n"), { env, shared, rows, worstRatio });
});
