// Gemma 3 270M in the browser, on the CPU backend: llama.cpp's greedy tokens for the goldens'
// prompts (crate/tests/fixtures/gemma3_goldens.json, scripts/make_gemma3_goldens.py), with
// llama.cpp on its own F32 dequantization as the exact reference where they part.

import fs from "node:fs";
import path from "node:path";
import { REPO_ROOT } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine, replyText } from "./harness";

const MODEL_URL = "/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf";

/** Where our token parts from llama.cpp's, the exact reference's top two may be this close
 * and count as a tie (crate/tests/gemma3_model.rs EXACT_TIE). */
const EXACT_TIE = 0.05;

/** The prompt's last logits, as the browser's log-probabilities give them (each of the 20
 * likeliest less the likeliest), may differ from the exact reference's by this much. The CPU
 * backend quantizes each product's input to 16 bits per block of 32; natively its logits are
 * within a relative L2 of 1e-3 (crate/tests/gemma3_model.rs LOGIT_BOUND); measured here 2-3e-3. */
const LOGIT_DIFF_BOUND = 0.02;

interface Case {
  name: string;
  text: string;
  prompt_ids: number[];
  greedy_ids: number[];
  exact_top2: Array<[[number, number], [number, number]]>;
  /** The exact reference's last logits: [id, logit] of the 64 largest and every 512th id. */
  exact_last_logits?: Array<[number, number]>;
}

const goldens = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "crate", "tests", "fixtures", "gemma3_goldens.json"), "utf8")) as { n_continue: number; cases: Case[] };
// All ten: short prompts in several scripts, code, whitespace runs, emoji, Gemma's turn markers,
// and one over 1,000 tokens (twice the local layers' window).
const CASES = goldens.cases;

test("Gemma 3 270M's greedy tokens in the browser are llama.cpp's, or the exact reference's where they part (cpu)", async ({ harness: page }, testInfo) => {
  test.setTimeout(300_000);
  expect(CASES.length).toBeGreaterThanOrEqual(10);
  expect(CASES.some((c) => c.prompt_ids.length > 1000)).toBe(true);
  const { engine, info } = await loadEngine(page, { model: MODEL_URL, backend: "cpu" });
  expect(info.backend).toBe("cpu");
  // A base model: no chat template, so chats are refused by name and completions serve it.
  expect(info.hasChatTemplate).toBe(false);
  const chat = await engine.tryChat({ messages: [{ role: "user", content: "Hello" }], max_tokens: 4 });
  expect(chat.ok).toBe(false);
  if (!chat.ok) expect(`${chat.error.name}: ${chat.error.message}`).toMatch(/InvalidRequestError: .*no chat template/);
  for (const c of CASES) {
    await test.step(c.name, async () => {
      const reply = await engine.complete({ prompt: c.text, max_tokens: goldens.n_continue, temperature: 0, ignore_eos: true });
      expect.soft(reply.usage.prompt_tokens, `${c.name}: as many prompt tokens as llama.cpp's`).toBe(c.prompt_ids.length);
      expect.soft(reply.tokens.length).toBe(goldens.n_continue);
      const step = reply.tokens.findIndex((t: number, i: number) => t !== c.greedy_ids[i]);
      if (step < 0) return;
      const exact = c.exact_top2[step];
      if (exact === undefined) throw new Error(`${c.name}: no exact reference at step ${step}`);
      const [[exactBest, e1], [, e2]] = exact;
      const note = `${c.name}: step ${step}: browser ${reply.tokens[step]} vs llama.cpp ${c.greedy_ids[step]}; the exact reference picks ${exactBest} (gap ${(e1 - e2).toFixed(3)})`;
      console.log(note);
      testInfo.annotations.push({ type: "parted from llama.cpp", description: note });
      expect.soft(reply.tokens[step] === exactBest || e1 - e2 < EXACT_TIE, `${note}; browser text ${JSON.stringify(replyText(reply))}`).toBe(true);
    });
  }
});

test("Gemma 3 270M's last logits in the browser are the exact reference's, through the log-probabilities (cpu)", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const cases = CASES.filter((c) => (c.exact_last_logits?.length ?? 0) > 0);
  expect(cases.length).toBeGreaterThanOrEqual(2);
  const { engine } = await loadEngine(page, { model: MODEL_URL, backend: "cpu" });
  for (const c of cases) {
    const reply = await engine.complete({ prompt: c.text, max_tokens: 1, temperature: 0, logprobs: 20 });
    const first = reply.choices[0].logprobs?.content[0];
    if (!first) throw new Error(`${c.name}: no log-probabilities`);
    const exact = new Map(c.exact_last_logits);
    const top = first.top_logprobs;
    expect(top).toHaveLength(20);
    const [best] = top;
    const bestExact = exact.get(best?.id ?? -1);
    if (best === undefined || bestExact === undefined) throw new Error(`${c.name}: the likeliest token is not among the reference's largest logits`);
    let worst = 0;
    for (const t of top) {
      const e = exact.get(t.id);
      if (e === undefined) throw new Error(`${c.name}: token ${t.id}, 20th likeliest or better here, is not among the reference's 64 largest`);
      // Differences of log-probabilities are differences of logits (the normaliser cancels).
      worst = Math.max(worst, Math.abs(t.logprob - best.logprob - (e - bestExact)));
    }
    console.log(`${c.name}: top-20 logit differences within ${worst.toFixed(4)} of the exact reference's`);
    expect(worst, c.name).toBeLessThan(LOGIT_DIFF_BOUND);
  }
});
