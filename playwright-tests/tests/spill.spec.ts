import { ORIGIN } from "../browser";
import { TINY_UNTIED_MODEL, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { type EngineHandle, loadEngine } from "./harness";
import type { ChatMessage } from "./radixlm";

// The tiny model's tokenizer is byte-level: this system prompt is about 500 tokens, 30 pages.
const SYSTEM: ChatMessage = {
  role: "system",
  content:
    "You are the archivist of the Harbour Light Museum. The lighthouse was built in 1858 on a rocky headland " +
    "and kept by the Olsen family for three generations. Its tower is 34 metres tall, painted in red and white " +
    "bands, and its lamp could be seen 40 kilometres out at sea. Visitors climb 212 steps to the lantern room. " +
    "The keepers' logs, kept in the museum's reading room, record every ship, storm and repair since 1860. " +
    "Answer briefly, from these facts only.",
};
const GREEDY = { max_tokens: 24, temperature: 0 };
const ask = (question: string) => ({ ...GREEDY, messages: [SYSTEM, { role: "user" as const, content: question }] });

/** Waits until the spill tier holds at least `pages` pages (write-behind runs while the engine is idle). */
async function writtenBehind(engine: EngineHandle, pages: number): Promise<void> {
  await expect.poll(async () => (await engine.cacheStats()).spill?.records ?? 0, { message: "pages written behind" }).toBeGreaterThanOrEqual(pages);
}

test("a long system prompt comes back from IndexedDB after a reload, and the answer is a cold run's", async ({ harness: page }) => {
  const model = testModelUrl(TINY_UNTIED_MODEL);
  await test.step("ask a first question, and let its pages reach IndexedDB", async () => {
    const { engine } = await loadEngine(page, { model });
    await engine.clearCache();
    const first = await engine.chat(ask("When was the lighthouse built?"));
    expect(first.usage.prompt_tokens, "the system prompt is long").toBeGreaterThan(400);
    // The whole pages of the prompt and of the reply (its last token has no KV yet).
    await writtenBehind(engine, Math.floor((first.usage.prompt_tokens + first.usage.completion_tokens - 1) / 16));
  });

  await page.reload();
  const { engine } = await loadEngine(page, { model });

  const restored = await test.step("after the reload, another question restores the system prompt", async () => {
    const r = await engine.chat(ask("How many steps lead to the lantern room?"));
    const details = r.usage.prompt_tokens_details;
    expect(details.cached_tokens, "the GPU tier is new").toBe(0);
    expect(details.restored_tokens, "the system prompt's pages come from IndexedDB").toBeGreaterThan(400);
    expect(r.stats.restored_tokens).toBe(details.restored_tokens);
    expect(r.stats.prefilled_tokens).toBe(r.usage.prompt_tokens - details.restored_tokens);
    const { spill } = await engine.cacheStats();
    expect(spill?.tokensRestored).toBe(details.restored_tokens);
    expect(spill?.recordsRejected).toBe(0);
    return r;
  });

  await test.step("the same question cold (both tiers cleared) answers the same", async () => {
    await engine.clearCache();
    expect((await engine.cacheStats()).spill?.records, "clear() empties IndexedDB too").toBe(0);
    const cold = await engine.chat(ask("How many steps lead to the lantern room?"));
    expect(cold.usage.prompt_tokens_details.restored_tokens).toBe(0);
    expect(cold.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(cold.tokens).toEqual(restored.tokens);
    expect(cold.choices[0].message.content).toBe(restored.choices[0].message.content);
  });
});

test("a full storage quota never fails a request", async ({ harness: page }) => {
  // The origin may store next to nothing (set before IndexedDB is first opened, which is when
  // Chromium reads it): every write of the spill tier fails with QuotaExceededError.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Storage.overrideQuotaForOrigin", { origin: ORIGIN, quotaSize: 1 });
  try {
    const { engine } = await loadEngine(page, { model: testModelUrl(TINY_UNTIED_MODEL), cacheModel: false });
    const first = await engine.chat(ask("Who kept the lighthouse?"));
    const second = await engine.chat(ask("How tall is the tower?"));
    expect(second.usage.prompt_tokens_details.cached_tokens, "the GPU tier still works").toBeGreaterThan(0);
    await expect.poll(async () => (await engine.cacheStats()).spill?.storeErrors ?? 0, { message: "the failed writes are counted" }).toBeGreaterThan(0);
    const { spill } = await engine.cacheStats();
    expect(spill?.lastStoreError).toMatch(/quota/i);
    expect(spill?.records).toBe(0);
    await test.step("with both tiers cleared, the first question answers as before", async () => {
      await engine.clearCache();
      const again = await engine.chat(ask("Who kept the lighthouse?"));
      expect(again.usage.prompt_tokens_details.cached_tokens).toBe(0);
      expect(again.tokens).toEqual(first.tokens);
    });
  } finally {
    await cdp.send("Storage.overrideQuotaForOrigin", { origin: ORIGIN });
  }
});
