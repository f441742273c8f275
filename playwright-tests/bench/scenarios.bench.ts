// Where users feel the cache, for both engines on the same conversations: (a) a follow-up question
// in the same conversation; (b) switching back and forth between two conversations with different
// long system prompts (A, B, A, B, … eight requests); (c) one system prompt shared by five new
// conversations; (d) coming back after a page reload. Each request's TTFT (in the page) and the
// prompt tokens it computed.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts scenarios
//   RADIXLM_BENCH_SIZE=smoke: 128-token system prompts instead of 512
//   RADIXLM_BENCH_BACKEND=cpu|webgpu|cpu,webgpu (radixlm's backends, each in a browser context of its own) · RADIXLM_BENCH_THREADS=N
//
// Controls: radixlm must reuse the system prompt where the scenario offers it ((a)-(c)) and
// restore it after the reload ((d)); a failed control voids the scenario and fails the run.

import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test, type BrowserContext } from "@playwright/test";
import { benchBackends, benchThreads, describe, RadixlmEngine, runEnvironment, WllamaEngine, type BenchEngine, type Message, type Run } from "./engines";
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

/** One engine's requests in one scenario. */
interface EngineRuns {
  engine: string;
  requests: Request[];
  /** Null when every control passed (wllama has none); else what failed (its figures are void). */
  failedControl: string | null;
}

interface Scenario {
  name: string;
  /** Each radixlm backend, then wllama. */
  engines: EngineRuns[];
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

test("scenarios: follow-up, switching, shared system prompt, after a reload — radixlm (CPU and WebGPU) beside wllama", async ({ browser }) => {
  const { smoke } = benchSize();
  const docTokens = smoke ? 128 : 512;
  // ~37 tokens per copy of either text; a little over is fine, the tables count tokens exactly.
  const copies = Math.ceil(docTokens / 37);
  const A = system(PROTOCOL.filler.repeat(copies), "You are the lighthouse's archivist.");
  const B = system(HARBOUR.repeat(copies), "You are the harbour's clerk.");

  // Each radixlm backend in a browser context of its own (its own Cache API and IndexedDB); wllama beside the first.
  const contexts: BrowserContext[] = await Promise.all(benchBackends().map(() => browser.newContext()));
  const radixes = await Promise.all(benchBackends().map(async (backend, i) => new RadixlmEngine(await (contexts[i] as BrowserContext).newPage(), backend, benchThreads())));
  const wllama = new WllamaEngine(await (contexts[0] as BrowserContext).newPage(), benchThreads());
  for (const engine of [...radixes, wllama]) await engine.open();
  const pageSize = await (radixes[0] as RadixlmEngine).pageSize();
  const scenarios: Scenario[] = [];

  type Chat = (label: string, messages: Message[]) => Promise<Run>;
  /** Runs `steps` on one engine from an empty cache and records each request. */
  async function on(engine: BenchEngine, steps: (chat: Chat) => Promise<void>): Promise<Request[]> {
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

  const followUp = async (chat: Chat) => {
    const first = ask(A, QUESTIONS[0] as string);
    const reply = await chat("first question", first);
    await chat("follow-up", [...first, { role: "assistant", content: reply.text }, { role: "user", content: QUESTIONS[1] as string }]);
  };
  const switching = async (chat: Chat) => {
    for (let i = 0; i < 8; i++) await chat(`${i % 2 ? "B" : "A"} ${Math.floor(i / 2) + 1}`, ask(i % 2 ? B : A, QUESTIONS[Math.floor(i / 2)] as string));
  };
  const shared = async (chat: Chat) => {
    for (const [i, q] of QUESTIONS.entries()) await chat(`conversation ${i + 1}`, ask(A, q));
  };

  for (const [name, steps] of [
    ["(a) follow-up in the same conversation", followUp],
    ["(b) switching between two conversations", switching],
    ["(c) one system prompt, five new conversations", shared],
  ] as const) {
    const engines: EngineRuns[] = [];
    for (const radix of radixes) {
      const r = await on(radix, steps);
      // After its first request(s), every radixlm request has all but its last message cached:
      // it must reuse the whole pages of its prompt short of the new question's tokens.
      const warmFrom = name.startsWith("(b)") ? 2 : 1;
      const failures = r.slice(warmFrom).flatMap((q) => {
        const expected = Math.floor(Math.max(0, q.promptTokens - newTokensBound(q.question)) / pageSize) * pageSize;
        return q.reused < expected ? [`"${q.label}" reused ${q.reused} of ${q.promptTokens} prompt tokens, under ${expected}`] : [];
      });
      engines.push({ engine: radix.name, requests: r, failedControl: failures.length ? failures.join("; ") : null });
    }
    engines.push({ engine: wllama.name, requests: await on(wllama, steps), failedControl: null });
    scenarios.push({ name, engines });
  }

  // (d) Coming back: the system prompt was seen before the reload.
  {
    const before = ask(A, QUESTIONS[0] as string);
    const after = ask(A, QUESTIONS[1] as string);
    const engines: EngineRuns[] = [];
    for (const radix of radixes) {
      const r = await on(radix, async (chat) => {
        const seen = await chat("before the reload", before);
        await radix.writtenBehind(Math.floor(seen.promptTokens / pageSize));
        await radix.reload();
        await chat("after the reload", after);
      });
      const back = r[1];
      engines.push({ engine: radix.name, requests: r, failedControl: !back || back.restored === 0 ? "restored nothing from IndexedDB after the reload" : null });
    }
    const w = await on(wllama, async (chat) => {
      await chat("before the reload", before);
      await wllama.open();
      await chat("after the reload", after);
    });
    engines.push({ engine: wllama.name, requests: w, failedControl: null });
    scenarios.push({ name: "(d) after a page reload", engines });
  }
  const env = await runEnvironment(contexts[0] as BrowserContext);
  for (const c of contexts) await c.close();

  const names = [...radixes, wllama].map((e) => e.name);
  const lines = [
    describe(env),
    "",
    `${names.join(", ")}. Scenarios: system prompts of ~${docTokens} tokens, greedy replies of ${REPLY_TOKENS} tokens; TTFT in ms in the page; prefilled = prompt tokens computed (radixlm: reused from memory / restored from IndexedDB; wllama: reused from its slot).`,
    "",
    `| scenario | request | ${names.map((n) => `${n} TTFT | ${n} prefilled (${n.startsWith("wllama") ? "reused" : "reused / restored"})`).join(" | ")} |`,
    `|---|---|${names.map(() => "---:|---:|").join("")}`,
  ];
  for (const s of scenarios) {
    (s.engines[0] as EngineRuns).requests.forEach((first, i) => {
      const cells = s.engines.map((e) => {
        const q = e.requests[i];
        if (!q) return "— | —";
        const ttft = e.failedControl !== null ? "void" : q.ttftMs.toFixed(0);
        return `${ttft} | ${q.prefilled} (${e.engine.startsWith("wllama") ? q.reused : `${q.reused} / ${q.restored}`})`;
      });
      lines.push(`| ${i === 0 ? s.name : ""} | ${first.label} | ${cells.join(" | ")} |`);
    });
    for (const e of s.engines) if (e.failedControl) lines.push(`| | ${e.engine} FAIL: ${e.failedControl} |${names.map(() => " | |").join("")}`);
  }
  // The goals, radixlm backend by backend: TTFT at most wllama's in every request, and after the reload.
  for (const radix of radixes) {
    const pairs = scenarios.flatMap((s) => {
      const [mine, theirs] = [s.engines.find((e) => e.engine === radix.name), s.engines.find((e) => e.engine === wllama.name)];
      if (!mine || !theirs || mine.failedControl) return [];
      return mine.requests.map((q, i) => ({ s, q, w: theirs.requests[i] }));
    });
    const atMost = pairs.filter(({ q, w }) => w && q.ttftMs <= w.ttftMs).length;
    const reload = pairs.find(({ s, q }) => s.name.startsWith("(d)") && q.label === "after the reload");
    const reloadRatio = reload?.w ? ` After the reload, ${wllama.name}'s TTFT / ${radix.name}'s: ${(reload.w.ttftMs / reload.q.ttftMs).toFixed(1)}×.` : "";
    lines.push("", `${radix.name}: TTFT at most ${wllama.name}'s in ${atMost} of ${pairs.length} requests.${reloadRatio}`);
  }
  const table = lines.join("\n") + "\n";
  console.log(`\n${table}`);
  const out = resultsDir();
  const name = smoke ? "scenarios-smoke" : "scenarios";
  writeFileSync(path.join(out, `${name}.json`), JSON.stringify({ benchmark: "scenarios", size: smoke ? "smoke" : "full", ...env, docTokens, replyTokens: REPLY_TOKENS, threads: { ...Object.fromEntries(radixes.map((r) => [r.name, r.threads])), [wllama.name]: wllama.threads }, scenarios }, null, 2) + "\n");
  writeFileSync(path.join(out, `${name}.md`), table);
  // Each request's TTFT against its prompt length; a scenario's engine with a failed control is left out.
  const colors = ["#2457c5", "#1b9e5a", "#8e44ad", "#c0392b"];
  const series: Series[] = scenarios.flatMap((s, i): Series[] =>
    s.engines
      .filter((e) => e.failedControl === null)
      .map((e, j) => ({
        name: `${e.engine} ${s.name.slice(0, 3)}`,
        color: colors[i % colors.length] as string,
        markers: e.engine.startsWith("wllama") ? "hollow" : j === 0 ? "filled" : "square",
        points: e.requests.map((r): [number, number] => [r.promptTokens, r.ttftMs]).sort((a, b) => a[0] - b[0]),
      })),
  );
  writeFileSync(path.join(out, `${name}.svg`), ttftChart(`TTFT per request, ${env.model}, ${env.adapter}`, series, "prompt tokens"));
  for (const s of scenarios) for (const e of s.engines) expect(e.failedControl, `${s.name}, ${e.engine}`).toBeNull();
});
