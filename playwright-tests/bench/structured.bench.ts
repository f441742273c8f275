// The cost of structured output's token masks in the browser: for the default model's 49,152-token
// vocabulary, the milliseconds per step the grammar's mask takes (llguidance, in the engine's
// worker), from each constrained request's `stats.mask`, beside the same requests' decode speed.
// Requests: the test schemas (crate/tests/fixtures/json_schemas.json) greedy and sampled, a JSON
// object, and a long free string (inside a string nearly every token is allowed: the mask's
// widest case). Goals: every request's median under 1 ms and p99 under 5 ms.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts structured
//
// Prints a table and writes results/structured.md and .json (RADIXLM_BENCH_OUT elsewhere).

import { readFileSync } from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import type { ResponseFormat } from "../../pkg/src/index.js";
import { REPO_ROOT } from "../paths";
import { benchThreads, describe, RadixlmEngine, runEnvironment } from "./engines";
import { writeResults } from "./protocol";

interface Case {
  name: string;
  prompt: string;
  format: ResponseFormat;
  temperature: number;
  seed: number;
  maxTokens: number;
}

interface Row extends Case {
  steps: number;
  meanMs: number;
  medianMs: number;
  p99Ms: number;
  maxMs: number;
  decodeTokensPerS: number;
  finish: string;
}

const MEDIAN_GOAL_MS = 1;
const P99_GOAL_MS = 5;

function cases(): Case[] {
  const schemas: Array<{ prompt: string; schema: Record<string, unknown> }> = JSON.parse(readFileSync(path.join(REPO_ROOT, "crate", "tests", "fixtures", "json_schemas.json"), "utf8")).cases;
  const out: Case[] = [];
  schemas.forEach(({ prompt, schema }, i) => {
    for (const [temperature, seed] of [[0, 0], [0.9, 1]] as const) {
      out.push({ name: `schema ${i + 1}${temperature ? " sampled" : ""}`, prompt, format: { type: "json_schema", json_schema: { name: "reply", schema } }, temperature, seed, maxTokens: 160 });
    }
  });
  out.push({ name: "json_object", prompt: "Give a person's name and age as JSON.", format: { type: "json_object" }, temperature: 0, seed: 0, maxTokens: 160 });
  const story = { type: "object", properties: { story: { type: "string", maxLength: 600 } }, required: ["story"], additionalProperties: false };
  out.push({ name: "free string", prompt: "Tell me a story about a lighthouse keeper, as JSON.", format: { type: "json_schema", json_schema: { name: "story", schema: story } }, temperature: 0.8, seed: 3, maxTokens: 160 });
  return out;
}

test("structured: token mask cost per step in the browser", async ({ context }) => {
  const env = await runEnvironment(context);
  const page = await context.newPage();
  const engine = new RadixlmEngine(page, "cpu", benchThreads());
  await engine.open();
  const rows: Row[] = [];
  for (const c of cases()) {
    const result = await page.evaluate(async ({ prompt, format, temperature, seed, maxTokens }) => {
      const rx = (window as unknown as { benchEngine: import("../../pkg/src/index.js").Engine }).benchEngine;
      const reply = await rx.chat.completions.create({ messages: [{ role: "user", content: prompt }], response_format: format, temperature, seed, max_tokens: maxTokens });
      return { mask: reply.stats.mask, decode: reply.stats.decode_tokens_per_s, finish: reply.choices[0].finish_reason };
    }, c);
    expect(result.mask, `${c.name}: stats.mask`).not.toBeNull();
    const m = result.mask!;
    rows.push({ ...c, steps: m.steps, meanMs: m.mean_ms, medianMs: m.median_ms, p99Ms: m.p99_ms, maxMs: m.max_ms, decodeTokensPerS: result.decode, finish: result.finish });
  }
  await engine.close();

  const worstMedian = Math.max(...rows.map((r) => r.medianMs));
  const worstP99 = Math.max(...rows.map((r) => r.p99Ms));
  const f = (x: number) => x.toFixed(3);
  const lines = [
    `# Token mask cost per step (radixlm CPU backend, ${engine.threads} thread${engine.threads === 1 ? "" : "s"})`,
    "",
    "| request | steps | mean ms | median ms | p99 ms | max ms | decode tok/s | finish |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
    ...rows.map((r) => `| ${r.name} | ${r.steps} | ${f(r.meanMs)} | ${f(r.medianMs)} | ${f(r.p99Ms)} | ${f(r.maxMs)} | ${r.decodeTokensPerS.toFixed(1)} | ${r.finish} |`),
    "",
    `Worst request's median ${f(worstMedian)} ms (goal < ${MEDIAN_GOAL_MS}), worst p99 ${f(worstP99)} ms (goal < ${P99_GOAL_MS}).`,
    "",
    describe(env),
  ];
  writeResults("structured", lines.join("\n"), { env, rows });
});
