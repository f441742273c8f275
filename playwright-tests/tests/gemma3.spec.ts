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

interface Case {
  name: string;
  text: string;
  prompt_ids: number[];
  greedy_ids: number[];
  exact_top2: Array<[[number, number], [number, number]]>;
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
