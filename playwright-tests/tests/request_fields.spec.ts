// The rest of OpenAI's request through the package (CPU backend, the default model): `n` choices
// computing the prompt once, streamed by index with `stream_options.include_usage`;
// log-probabilities in the chat and legacy completion shapes; penalties and logit biases; and
// fields the API does not take refused by name, before anything is computed.

import type { ChatCompletion, ChatCompletionChunk } from "./radixlm";
import { DEFAULT_MODEL_URL } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine } from "./harness";

const ASK = [{ role: "user" as const, content: "Name three things you might find at a seaside market, and why." }];

const contents = (r: ChatCompletion) => r.choices.map((c) => c.message.content);

test("n: 3 computes the prompt once; greedy choices are equal, sampled ones are their seeds' replies", async ({ harness: page }) => {
  test.setTimeout(240_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const greedy = await engine.chat({ messages: ASK, n: 3, temperature: 0, max_tokens: 16 });
  expect(greedy.choices.map((c) => c.index)).toEqual([0, 1, 2]);
  expect(new Set(contents(greedy)).size, JSON.stringify(contents(greedy))).toBe(1);
  expect(greedy.usage.prompt_tokens_details.cached_tokens).toBe(0);
  expect(greedy.stats.prefilled_tokens, "the prompt computed once").toBe(greedy.usage.prompt_tokens);
  expect(greedy.usage.completion_tokens).toBe(greedy.choices.reduce((n, c) => n + c.tokens.length, 0));
  expect(greedy.stats.generated_tokens).toBe(greedy.usage.completion_tokens);

  await engine.clearCache();
  const sampled = await engine.chat({ messages: ASK, n: 3, temperature: 0.9, seed: 5, max_tokens: 16 });
  expect(sampled.stats.prefilled_tokens).toBe(sampled.usage.prompt_tokens);
  expect(new Set(contents(sampled)).size, "three seeds, more than one reply").toBeGreaterThan(1);
  for (const [i, choice] of sampled.choices.entries()) {
    const alone = await engine.chat({ messages: ASK, temperature: 0.9, seed: 5 + i, max_tokens: 16 });
    expect(choice.tokens, `choice ${i}`).toEqual(alone.tokens);
  }
  expect((await engine.cacheStats()).lockedPages).toBe(0);
});

test("a stream of two choices comes by index, each ending with its finish, then the usage chunk", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const request = { messages: ASK, n: 2, temperature: 0.8, seed: 3, max_tokens: 24 };
  const whole = await engine.chat(request);
  const { chunks, error } = await engine.streamChat({ ...request, stream_options: { include_usage: true } });
  expect(error).toBeNull();
  const usage = chunks.at(-1);
  expect(usage?.choices).toEqual([]);
  expect(usage?.usage?.completion_tokens).toBe(whole.usage.completion_tokens);
  expect(usage?.usage?.prompt_tokens_details.cached_tokens, "the prompt's pages from the first request").toBeGreaterThan(0);
  for (const index of [0, 1]) {
    const mine = chunks.filter((c): c is ChatCompletionChunk => c.choices[0]?.index === index);
    expect(mine[0]?.choices[0]?.delta.role).toBe("assistant");
    expect(mine.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(whole.choices[index]?.message.content);
    const finish = mine.filter((c) => c.choices[0]?.finish_reason !== null);
    expect(finish.map((c) => c.choices[0]?.finish_reason)).toEqual([whole.choices[index]?.finish_reason]);
    expect(finish[0]?.tokens).toEqual(whole.choices[index]?.tokens);
  }
});

test("log-probabilities: the chat shape, the legacy completion shape, and streamed", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const chat = await engine.chat({ messages: ASK, temperature: 0, max_tokens: 12, logprobs: true, top_logprobs: 3 });
  const content = chat.choices[0].logprobs?.content ?? [];
  expect(content).toHaveLength(chat.tokens.length);
  expect(content.map((e) => e.id)).toEqual(chat.tokens);
  for (const entry of content) {
    expect(entry.logprob).toBeLessThanOrEqual(0);
    expect(entry.top_logprobs).toHaveLength(3);
    // Greedy: the chosen token is the likeliest.
    expect(entry.top_logprobs[0]).toEqual({ token: entry.token, logprob: entry.logprob, bytes: entry.bytes, id: entry.id });
    const lps = entry.top_logprobs.map((t) => t.logprob);
    expect(lps).toEqual([...lps].sort((a, b) => b - a));
  }
  const bytes = Uint8Array.from(content.flatMap((e) => e.bytes));
  expect(new TextDecoder().decode(bytes)).toBe(chat.choices[0].message.content);
  const plain = await engine.chat({ messages: ASK, temperature: 0, max_tokens: 12 });
  expect(plain.choices[0].logprobs).toBeNull();
  expect(plain.tokens).toEqual(chat.tokens);

  const completion = await engine.complete({ prompt: "The sea was calm and", temperature: 0, max_tokens: 10, logprobs: 2 });
  const legacy = completion.choices[0].logprobs;
  expect(legacy?.tokens).toHaveLength(completion.tokens.length);
  expect(legacy?.token_logprobs.every((l) => l <= 0)).toBe(true);
  expect(legacy?.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2)).toBe(true);
  expect(legacy?.text_offset[0]).toBe(0);
  expect(legacy?.tokens.join("")).toBe(completion.choices[0].text);
  legacy?.text_offset.forEach((o, i) => expect(o).toBe(legacy.tokens.slice(0, i).join("").length));

  const { chunks, error } = await engine.streamChat({ messages: ASK, temperature: 0, max_tokens: 12, logprobs: true });
  expect(error).toBeNull();
  const streamed = chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []);
  expect(streamed.map((e) => e.token)).toEqual(content.map((e) => e.token));
  expect(streamed.every((e) => e.top_logprobs.length === 0)).toBe(true);
});

test("penalties and logit biases change the reply as asked", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const messages = [{ role: "user" as const, content: "Tell me about cats, as JSON." }];
  const plain = await engine.chat({ messages, temperature: 0, max_tokens: 64 });
  const penalised = await engine.chat({ messages, temperature: 0, max_tokens: 64, repetition_penalty: 1.3 });
  expect(penalised.tokens).not.toEqual(plain.tokens);
  const spread = await engine.chat({ messages, temperature: 0, max_tokens: 64, frequency_penalty: 0.8, presence_penalty: 0.5 });
  expect(spread.tokens).not.toEqual(plain.tokens);
  const [first, second] = plain.tokens;
  const banned = await engine.chat({ messages, temperature: 0, max_tokens: 4, logit_bias: { [String(first)]: -100 } });
  expect(banned.tokens[0]).not.toBe(first);
  const forced = await engine.chat({ messages, temperature: 0, max_tokens: 4, logit_bias: { [String(second)]: 100 } });
  expect(forced.tokens).toEqual([second, second, second, second]);
});

test("fields the API does not take, or takes otherwise, are InvalidRequestErrors naming them, before anything is computed", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const refused: Array<[Record<string, unknown>, RegExp]> = [
    [{ prediction: { type: "content", content: "x" } }, /"prediction" is not a field/],
    [{ functions: [], audio: {} }, /"functions", "audio" are not fields/],
    [{ stream: true, stream_options: { include_obfuscation: true } }, /"include_obfuscation" is not a field/],
    [{ n: 0 }, /n must be between 1 and 16, got 0/],
    [{ temperature: -1 }, /temperature must be a number >= 0/],
    [{ max_tokens: 1.5 }, /max_tokens: invalid type: floating point `1.5`/],
    [{ n: 17 }, /n must be between 1 and 16/],
    [{ top_logprobs: 2 }, /top_logprobs needs logprobs: true/],
    [{ logprobs: 2 }, /logprobs is true or false/],
    [{ logprobs: true, top_logprobs: 21 }, /top_logprobs must be at most 20/],
    [{ logit_bias: { cat: 1 } }, /logit_bias keys must be token ids/],
    [{ logit_bias: { "5": 300 } }, /logit_bias values must be a number in \[-100, 100\]/],
    [{ frequency_penalty: 3 }, /frequency_penalty must be a number in \[-2, 2\]/],
    [{ max_tokens: 4, max_completion_tokens: 5 }, /disagree/],
  ];
  for (const [fields, says] of refused) {
    const outcome = await engine.tryChat({ messages: ASK, max_tokens: 4, ...fields });
    expect(outcome.ok, JSON.stringify(fields)).toBe(false);
    if (outcome.ok) continue;
    expect(outcome.error.name, JSON.stringify(fields)).toBe("InvalidRequestError");
    expect(outcome.error.message).toMatch(says);
  }
  const completion = await engine.tryComplete({ prompt: "Hi", logprobs: true } as unknown as { prompt: string });
  expect(completion.ok).toBe(false);
  expect((await engine.cacheStats()).cachedPages, "nothing was computed").toBe(0);
});
