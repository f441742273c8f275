import { DEFAULT_MODEL_FILE, DEFAULT_MODEL_URL, TINY_Q4_0_MODEL, TINY_UNTIED_MODEL, testModelFile, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine, replyText } from "./harness";
import { compareGreedy, nativeGenerate, NEAR_TIE } from "./native";

const MAX_TOKENS = 16;

// The synthetic models tokenize bytes; their control tokens (`<|extra_N|>`) reach ids across
// their whole vocabulary (the default model reads that text as ordinary characters).
const PROMPTS: Array<{ kind: "completion" | "chat"; prompt: string }> = [
  { kind: "completion", prompt: "The capital of France is" },
  { kind: "completion", prompt: "<|extra_20000|><|extra_45000|>def fibonacci(n):\n    " },
  { kind: "chat", prompt: "What is the boiling point of water at sea level?" },
  { kind: "chat", prompt: "Write a haiku about autumn leaves." },
];

// The default model (Q4_1 layers, a Q8_0 embedding as its LM head), and tiny synthetic models
// with Q4_1 and Q4_0 projections: every matmul path the kernels have.
const MODELS = [
  { name: "the default model", url: DEFAULT_MODEL_URL, file: DEFAULT_MODEL_FILE },
  { name: TINY_UNTIED_MODEL, url: testModelUrl(TINY_UNTIED_MODEL), file: testModelFile(TINY_UNTIED_MODEL) },
  { name: TINY_Q4_0_MODEL, url: testModelUrl(TINY_Q4_0_MODEL), file: testModelFile(TINY_Q4_0_MODEL) },
];

// The real model runs on the CPU backend, the faster one where the only GPU is a software one;
// WebGPU's own kernels are checked on the synthetic models, which cover its every matmul path.
const RUNS = [...MODELS.slice(1).map((model) => ({ backend: "webgpu" as const, model })), ...MODELS.map((model) => ({ backend: "cpu" as const, model }))];

for (const { backend, model } of RUNS) test(`greedy output in the browser equals the native CLI's, token for token (${backend}, ${model.name})`, async ({ harness: page }, testInfo) => {
  // Four native runs and four browser runs.
  test.setTimeout(480_000);
  const { engine, info } = await loadEngine(page, { model: model.url, backend });
  expect(info.backend).toBe(backend);

  for (const { kind, prompt } of PROMPTS) {
    await test.step(`${kind} ${JSON.stringify(prompt)}`, async () => {
      const native = nativeGenerate(prompt, { chat: kind === "chat", maxTokens: MAX_TOKENS, model: model.file, backend });
      const request = { max_tokens: MAX_TOKENS, temperature: 0 };
      const browser =
        kind === "chat"
          ? await engine.chat({ ...request, messages: [{ role: "user", content: prompt }] })
          : await engine.complete({ ...request, prompt });

      expect.soft(browser.usage.prompt_tokens, "as many prompt tokens as the native tokenizer gives").toBe(native.prompt_ids.length);

      const verdict = compareGreedy(browser.tokens, native);
      if (verdict.kind === "near-tie") {
        const note = `near tie on ${kind} ${JSON.stringify(prompt)} at step ${verdict.step}: browser ${verdict.browser}, native ${verdict.native}, native top-2 gap ${verdict.gap.toFixed(4)} < ${NEAR_TIE}`;
        console.log(note);
        testInfo.annotations.push({ type: "near tie", description: note });
      } else {
        // Soft: every prompt is compared and reported, not only the first that differs.
        expect
          .soft(verdict, `browser ${JSON.stringify(browser.tokens)} ${JSON.stringify(replyText(browser))} vs native ${JSON.stringify(native.tokens)} ${JSON.stringify(native.text)}`)
          .toEqual({ kind: "equal" });
      }
    });
  }
});
