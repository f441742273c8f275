import { DEFAULT_MODEL_URL } from "../paths";
import { expect, test } from "./fixtures";
import { chunkText, loadEngine } from "./harness";

// Streaming is the worker's and the client's: the real model on the CPU backend, the faster one
// here (WebGPU is a software GPU).
test("a streamed reply arrives in pieces that add up to the non-streamed reply", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const request = {
    max_tokens: 32,
    temperature: 0,
    messages: [{ role: "user" as const, content: "Tell me a short story about a lighthouse keeper and a storm." }],
  };

  const whole = await test.step("ask without streaming", () => engine.chat(request));
  // One top-2 gap per token: a lead, so never negative; a greedy 32-token reply has decisive steps.
  expect(whole.top2_gaps).toHaveLength(whole.tokens.length);
  expect(whole.top2_gaps.every((g) => g >= 0)).toBe(true);
  expect(Math.max(...whole.top2_gaps)).toBeGreaterThan(1);

  await test.step("ask the same, streaming", async () => {
    const { chunks, error } = await engine.streamChat(request);
    expect(error).toBeNull();

    const pieces = chunks.map(chunkText);
    expect(pieces.filter((p) => p !== "").length, "several chunks carry text").toBeGreaterThanOrEqual(3);
    expect(pieces.join("")).toBe(whole.choices[0].message.content);
    for (const c of chunks) expect(c.object).toBe("chat.completion.chunk");

    const last = chunks.at(-1);
    expect(last?.choices[0]?.finish_reason).toBe(whole.choices[0].finish_reason);
    expect(last?.choices[0]?.delta.content ?? "", "the last chunk has an empty delta").toBe("");
    expect(last?.usage).toMatchObject({
      prompt_tokens: whole.usage.prompt_tokens,
      completion_tokens: whole.usage.completion_tokens,
      total_tokens: whole.usage.total_tokens,
    });
    expect(last?.tokens).toEqual(whole.tokens);
    // The second request reuses the first's cached prompt: the same tokens, gaps within float noise.
    expect(last?.top2_gaps).toHaveLength(whole.top2_gaps.length);
    last?.top2_gaps?.forEach((g, i) => expect(Math.abs(g - (whole.top2_gaps[i] ?? NaN))).toBeLessThan(1e-2));
    for (const c of chunks.slice(0, -1)) expect(c.choices[0]?.finish_reason).toBeNull();
  });
});
