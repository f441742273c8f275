import { DEFAULT_MODEL_URL } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine } from "./harness";

// The CPU backend's threads split each product's output rows, never a sum, so a reply is the same
// token for token on any number of threads.
const REQUEST = { messages: [{ role: "user" as const, content: "Name three rivers of Europe and one fact about each." }], max_tokens: 32, temperature: 0 };
// Three engines of the default model in one page: a small KV cache each.
const KV = { kvBudgetBytes: 32 << 20 };

test("in a cross-origin-isolated page the CPU backend runs on a thread per core, and replies as on one thread", async ({ harness: page }) => {
  test.setTimeout(300_000);
  const { isolated, cores } = await page.evaluate(() => ({ isolated: crossOriginIsolated, cores: navigator.hardwareConcurrency }));
  expect(isolated, "scripts/serve.mjs sends COOP/COEP").toBe(true);

  const auto = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu", ...KV });
  expect(auto.info.threads, "every core, up to 8").toBe(Math.min(cores, 8));
  const three = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu", threads: 3, ...KV });
  expect(three.info.threads).toBe(3);
  const one = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu", threads: 1, ...KV });
  expect(one.info.threads).toBe(1);

  const reference = await one.engine.chat(REQUEST);
  expect(reference.tokens.length).toBe(32);
  for (const threaded of [auto, three]) {
    const reply = await threaded.engine.chat(REQUEST);
    expect(reply.tokens, `${threaded.info.threads} threads`).toEqual(reference.tokens);
  }
});

test("a page without cross-origin isolation runs the CPU backend on one thread", async ({ page }) => {
  // The harness page served without COOP/COEP: no SharedArrayBuffer, so no wasm threads.
  await page.route("**/harness/", async (route) => {
    const response = await route.fetch();
    const headers = { ...response.headers() };
    delete headers["cross-origin-opener-policy"];
    delete headers["cross-origin-embedder-policy"];
    await route.fulfill({ response, headers });
  });
  await page.goto("/harness/");
  await page.waitForFunction(() => typeof window.rx === "object");
  expect(await page.evaluate(() => crossOriginIsolated)).toBe(false);

  const { engine, info } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "auto", threads: 4, ...KV });
  expect(info.backend).toBe("cpu");
  expect(info.threads).toBe(1);
  const reply = await engine.chat(REQUEST);
  expect(reply.tokens.length).toBe(32);
});
