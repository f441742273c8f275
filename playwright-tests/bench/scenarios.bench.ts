// Where users feel the cache, for both engines on the same conversations: (a) a follow-up question
// in the same conversation; (b) switching back and forth between two conversations with different
// long system prompts (A, B, A, B, … eight requests); (c) one system prompt shared by five new
// conversations; (d) coming back after a page reload. Each request's TTFT (in the page) and the
// prompt tokens it computed.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts scenarios
//   RADIXLM_BENCH_SIZE=smoke: 128-token system prompts instead of 512
//
// Controls: radixlm must reuse the system prompt where the scenario offers it ((a)-(c)) and
// restore it after the reload ((d)); a failed control voids the scenario and fails the run.

import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test, type BrowserContext } from "@playwright/test";
import { benchBackend, benchThreads, describe, RadixlmEngine, runEnvironment, WllamaEngine, type BenchEngine, type Message, type Run } from "./engines";
import { ttftChart, type Series } from "./chart";
import { benchSize, PROTOCOL, resultsDir } from "./protocol";

/** A second document, unlike the protocol's filler from its first words. */
const HARBOUR = "The harbour master counted the boats at dawn, checked every mooring line, read the tide tables aloud and noted each cargo landed on the quay. ";
const QUESTIONS = [
  "What happens first each day?",
  "What is written down, and why?",
  "Who would read these notes?",
  "What changes when a storm comes?",
  "Summarise the routine in one sentence.",
];
const REPLY_TOKENS = 8;
/**
 * At most what a request's new turn can add to the cached conversation: its question (a token is
 * at least a byte) and the chat template's wrapping of it and of the reply before it.
 */
const newTokensBound = (question: string) => new TextEncoder().encode(question).length + 32;

interface Request {
  label: string;
  /** The request's last message: the new turn. */
  question: string;
  ttftMs: number;
  promptTokens: number;
  prefilled: number;
  reused: number;
  restored: number;
}

interface Scenario {
  name: string;
  radixlm: Request[];
  wllama: Request[];
  failedControl: string | null;
}

const record = (label: string, question: string, r: Run): Request => ({
  label,
  question,
  ttftMs: r.ttftMs,
  promptTokens: r.promptTokens,
  prefilled: r.prefilledTokens,
  reused: r.reusedTokens,
  restored: r.restoredTokens,
});

const system = (doc: string, role: string): Message => ({ role: "system", content: `${role} Answer briefly from these notes.\n\n${doc}` });
const ask = (sys: Message, question: string): Message[] => [sys, { role: "user", content: question }];

test("scenarios: follow-up, switching, shared system prompt, after a reload — radixlm beside wllama", async ({ browser }) => {
  const { smoke } = benchSize();
  const docTokens = smoke ? 128 : 512;
  // ~37 tokens per copy of either text; a little over is fine, the tables count tokens exactly.
  const copies = Math.ceil(docTokens / 37);
  const A = system(PROTOCOL.filler.repeat(copies), "You are the lighthouse's archivist.");
  const B = system(HARBOUR.repeat(copies), "You are the harbour's clerk.");

  const context: BrowserContext = await browser.newContext();
  const radix = new RadixlmEngine(await context.newPage(), benchBackend(), benchThreads());
  const wllama = new WllamaEngine(await context.newPage(), benchThreads());
  await radix.open();
  await wllama.open();
  const pageSize = await radix.pageSize();
  const scenarios: Scenario[] = [];

  /** Runs `steps` on one engine from an empty cache and records each request. */
  async function on(engine: BenchEngine, steps: (chat: (label: string, messages: Message[]) => Promise<Run>) => Promise<void>): Promise<Request[]> {
    await engine.forget();
    if (engine instanceof RadixlmEngine) await engine.writtenBehind(0);
    const out: Request[] = [];
    await steps(async (label, messages) => {
      const run = await engine.chat(messages, REPLY_TOKENS);
      out.push(record(label, messages.at(-1)?.content ?? "", run));
      return run;
    });
    return out;
  }

  const followUp = async (chat: (l: string, m: Message[]) => Promise<Run>) => {
    const first = ask(A, QUESTIONS[0] as string);
    const reply = await chat("first question", first);
    await chat("follow-up", [...first, { role: "assistant", content: reply.text }, { role: "user", content: QUESTIONS[1] as string }]);
  };
  const switching = async (chat: (l: string, m: Message[]) => Promise<Run>) => {
    for (let i = 0; i < 8; i++) await chat(`${i % 2 ? "B" : "A"} ${Math.floor(i / 2) + 1}`, ask(i % 2 ? B : A, QUESTIONS[Math.floor(i / 2)] as string));
  };
  const shared = async (chat: (l: string, m: Message[]) => Promise<Run>) => {
    for (const [i, q] of QUESTIONS.entries()) await chat(`conversation ${i + 1}`, ask(A, q));
  };

  for (const [name, steps] of [
    ["(a) follow-up in the same conversation", followUp],
    ["(b) switching between two conversations", switching],
    ["(c) one system prompt, five new conversations", shared],
  ] as const) {
    const r = await on(radix, steps);
    const w = await on(wllama, steps);
    const failures: string[] = [];
    // After its first request(s), every radixlm request has all but its last message cached:
    // it must reuse the whole pages of its prompt short of the new question's tokens.
    const warmFrom = name.startsWith("(b)") ? 2 : 1;
    r.slice(warmFrom).forEach((q) => {
      const expected = Math.floor(Math.max(0, q.promptTokens - newTokensBound(q.question)) / pageSize) * pageSize;
      if (q.reused < expected) failures.push(`radixlm "${q.label}" reused ${q.reused} of ${q.promptTokens} prompt tokens, under ${expected}`);
    });
    scenarios.push({ name, radixlm: r, wllama: w, failedControl: failures.length ? failures.join("; ") : null });
  }

  // (d) Coming back: the system prompt was seen before the reload.
  {
    const before = ask(A, QUESTIONS[0] as string);
    const after = ask(A, QUESTIONS[1] as string);
    const r = await on(radix, async (chat) => {
      const seen = await chat("before the reload", before);
      await radix.writtenBehind(Math.floor(seen.promptTokens / pageSize));
      await radix.reload();
      await chat("after the reload", after);
    });
    const w = await on(wllama, async (chat) => {
      await chat("before the reload", before);
      await wllama.open();
      await chat("after the reload", after);
    });
    const back = r[1];
    const failed = !back || back.restored === 0 ? "radixlm restored nothing from IndexedDB after the reload" : null;
    scenarios.push({ name: "(d) after a page reload", radixlm: r, wllama: w, failedControl: failed });
  }
  const env = await runEnvironment(context);
  await context.close();

  const lines = [
    describe(env),
    "",
    `${radix.name} beside wllama. Scenarios: system prompts of ~${docTokens} tokens, greedy replies of ${REPLY_TOKENS} tokens; TTFT in ms in the page; prefilled = prompt tokens computed (radixlm: reused from the GPU / restored from IndexedDB; wllama: reused from its slot).`,
    "",
    "| scenario | request | radixlm TTFT | radixlm prefilled (reused / restored) | wllama TTFT | wllama prefilled (reused) |",
    "|---|---|---:|---:|---:|---:|",
  ];
  for (const s of scenarios) {
    s.radixlm.forEach((r, i) => {
      const w = s.wllama[i];
      const void_ = s.failedControl !== null;
      lines.push(
        `| ${i === 0 ? s.name : ""} | ${r.label} | ${void_ ? "void" : r.ttftMs.toFixed(0)} | ${r.prefilled} (${r.reused} / ${r.restored}) | ${w ? w.ttftMs.toFixed(0) : "—"} | ${w ? `${w.prefilled} (${w.reused})` : "—"} |`,
      );
    });
    if (s.failedControl) lines.push(`| | FAIL: ${s.failedControl} | | | | |`);
  }
  const table = lines.join("\n") + "\n";
  console.log(`\n${table}`);
  const out = resultsDir();
  const name = smoke ? "scenarios-smoke" : "scenarios";
  writeFileSync(path.join(out, `${name}.json`), JSON.stringify({ benchmark: "scenarios", size: smoke ? "smoke" : "full", ...env, docTokens, replyTokens: REPLY_TOKENS, scenarios }, null, 2) + "\n");
  writeFileSync(path.join(out, `${name}.md`), table);
  // Each request's TTFT against its prompt length; a scenario with a failed control is left out.
  const colors = ["#2457c5", "#1b9e5a", "#8e44ad", "#c0392b"];
  const series: Series[] = scenarios
    .filter((s) => s.failedControl === null)
    .flatMap((s, i): Series[] => {
      const points = (runs: Request[]) => runs.map((r): [number, number] => [r.promptTokens, r.ttftMs]).sort((a, b) => a[0] - b[0]);
      const color = colors[i % colors.length] as string;
      const label = s.name.slice(0, 3);
      return [
        { name: `radixlm ${label}`, color, markers: "filled", points: points(s.radixlm) },
        { name: `wllama ${label}`, color, markers: "hollow", points: points(s.wllama) },
      ];
    });
  writeFileSync(path.join(out, `${name}.svg`), ttftChart(`TTFT per request, ${env.model}, ${env.adapter}`, series, "prompt tokens"));
  for (const s of scenarios) expect(s.failedControl, s.name).toBeNull();
});
