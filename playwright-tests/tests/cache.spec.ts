import { DEFAULT_MODEL_URL, TINY_UNTIED_MODEL, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine } from "./harness";
import type { ChatMessage } from "./radixlm";

// Long enough (well over 100 tokens) to fill several 16-token KV pages.
const SYSTEM: ChatMessage = {
  role: "system",
  content:
    "You are the guide of the Harbour Light Museum, a lighthouse on a rocky headland that was built in 1858 " +
    "and kept by the same family for three generations. The tower is 34 metres tall, painted in red and white " +
    "bands, and its lamp could be seen 40 kilometres out at sea. Visitors climb 212 steps to the lantern room. " +
    "The museum opens at nine in the morning and closes at five in the evening, every day except Monday. " +
    "Answer visitors' questions briefly and politely, in one or two sentences, and never invent facts that " +
    "are not written here.",
};

const GREEDY = { max_tokens: 24, temperature: 0 };

// The cache sits above the backend seam: the first test runs on WebGPU (its pages, its
// equality) with a tiny synthetic model whose replies vary with the context (WebGPU is a
// software GPU here), the others on the CPU backend with the default model.

test("a request sharing a cached system prompt reuses it and answers as it would cold", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: testModelUrl(TINY_UNTIED_MODEL) });
  const askA = { ...GREEDY, messages: [SYSTEM, { role: "user" as const, content: "When was the lighthouse built?" }] };
  const askB = { ...GREEDY, messages: [SYSTEM, { role: "user" as const, content: "How many steps lead to the top?" }] };

  const cold = await test.step("ask B with an empty cache", async () => {
    await engine.clearCache();
    const r = await engine.chat(askB);
    expect(r.usage.prompt_tokens, "the system prompt is long").toBeGreaterThan(100);
    expect(r.usage.prompt_tokens_details.cached_tokens).toBe(0);
    return r;
  });

  await test.step("empty the cache and ask A", async () => {
    await engine.clearCache();
    await engine.chat(askA);
  });

  await test.step("ask B again: the system prompt comes from the cache and the answer is the same", async () => {
    const warm = await engine.chat(askB);
    expect(warm.usage.prompt_tokens).toBe(cold.usage.prompt_tokens);
    expect(warm.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(warm.usage.prompt_tokens_details.cached_tokens).toBeLessThan(warm.usage.prompt_tokens);
    expect(warm.tokens).toEqual(cold.tokens);
    expect(warm.choices[0].message.content).toBe(cold.choices[0].message.content);
  });
});

test("a conversation sent whole each turn reuses every earlier turn, replies included", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const { pageSize } = await engine.cacheStats();
  expect(pageSize).toBeGreaterThan(0);
  await engine.clearCache();

  const questions = ["Hi! What can you tell me about the lighthouse?", "How tall is it?", "And when does the museum open?"];
  const messages: ChatMessage[] = [SYSTEM];
  let previous: { prompt: number; completion: number } | null = null;

  for (const [turn, question] of questions.entries()) {
    await test.step(`turn ${turn + 1}: ${question}`, async () => {
      messages.push({ role: "user", content: question });
      const r = await engine.chat({ ...GREEDY, messages: [...messages] });
      const cached = r.usage.prompt_tokens_details.cached_tokens;
      if (previous) {
        // Everything the last request computed is cached except its partial last page.
        expect(cached, `reused of ${r.usage.prompt_tokens} prompt tokens`).toBeGreaterThanOrEqual(previous.prompt + previous.completion - pageSize);
      }
      expect(r.usage.completion_tokens).toBeGreaterThan(0);
      previous = { prompt: r.usage.prompt_tokens, completion: r.usage.completion_tokens };
      messages.push({ role: "assistant", content: r.choices[0].message.content ?? "" });
    });
  }
});

test("a pinned system prompt stays cached until it is unpinned", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const { pageSize } = await engine.cacheStats();

  const pinned = await test.step("pin the system prompt", async () => {
    const n = await engine.pin([SYSTEM]);
    expect(n).toBeGreaterThan(0);
    expect(n % pageSize, "whole pages are pinned").toBe(0);
    expect((await engine.cacheStats()).pinnedPages).toBeGreaterThan(0);
    return n;
  });

  await test.step("a question under that system prompt reuses the pinned tokens", async () => {
    const r = await engine.chat({ ...GREEDY, messages: [SYSTEM, { role: "user", content: "Is the museum open on Mondays?" }] });
    expect(r.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(pinned);
  });

  await test.step("unpin it", async () => {
    expect(await engine.unpin([SYSTEM])).toBe(true);
    expect((await engine.cacheStats()).pinnedPages).toBe(0);
    expect(await engine.unpin([SYSTEM]), "it is no longer pinned").toBe(false);
  });
});
