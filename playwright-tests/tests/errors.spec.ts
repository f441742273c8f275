import { closeSync, mkdirSync, openSync, readSync, writeFileSync } from "node:fs";
import { chromium } from "@playwright/test";
import { BASE_FLAGS, CHROMIUM_PATH, ORIGIN } from "../browser";
import { DEFAULT_MODEL_FILE, TEST_MODELS_DIR, TINY_MODEL, testModelFile, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine, openHarness, preparePage, tryLoadEngine } from "./harness";

test("without WebGPU, createEngine answers on the CPU, and backend \"webgpu\" says WebGPU is unavailable", async ({ consoleErrors }) => {
  // Chromium on Linux without --enable-unsafe-webgpu still has navigator.gpu (in the page and in
  // workers), but requestAdapter() resolves to null: "auto" takes the CPU, and an explicit
  // "webgpu" is NoAdapterError, a kind of WebGPUUnavailableError.
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: BASE_FLAGS });
  try {
    const page = await browser.newPage({ baseURL: ORIGIN });
    consoleErrors.watch(page);
    await preparePage(page);
    await openHarness(page);

    const { engine, info } = await loadEngine(page, { model: testModelUrl(TINY_MODEL), backend: "auto" });
    expect(info.backend).toBe("cpu");
    expect(info.threads, "a thread per core, up to 8 (the page is cross-origin isolated)").toBe(await page.evaluate(() => Math.min(navigator.hardwareConcurrency, 8)));
    const answer = await engine.complete({ prompt: "Hello, world", max_tokens: 8, temperature: 0 });
    expect(answer.tokens.length).toBe(8);

    const { outcome } = await tryLoadEngine(page, { model: testModelUrl(TINY_MODEL), backend: "webgpu" });
    expect(outcome.ok, "createEngine rejected").toBe(false);
    if (outcome.ok) return;
    expect(["WebGPUUnavailableError", "NoAdapterError"]).toContain(outcome.error.name);
    expect(outcome.error.name).toBe("NoAdapterError");
    expect(outcome.error.isNamedClass).toBe(true);
    expect(outcome.error.isWebGPUUnavailable, "it is the no-WebGPU error class").toBe(true);
    expect(outcome.error.isRadixlmError).toBe(true);
    expect(outcome.error.message).toMatch(/WebGPU/);
  } finally {
    await browser.close();
  }
});

/** The first `n` bytes of a file. */
function head(file: string, n: number): Buffer {
  const fd = openSync(file, "r");
  try {
    const buf = Buffer.alloc(n);
    const got = readSync(fd, buf, 0, n, 0);
    return buf.subarray(0, got);
  } finally {
    closeSync(fd);
  }
}

/** GGUF v3 header fields: magic, version, tensor count, metadata count. */
function ggufHeader(magic: string, tensors: bigint, kvs: bigint): Buffer {
  const b = Buffer.alloc(24 + 4096);
  b.write(magic, 0, "latin1");
  b.writeUInt32LE(3, 4);
  b.writeBigUInt64LE(tensors, 8);
  b.writeBigUInt64LE(kvs, 16);
  return b;
}

test("a corrupt GGUF file is refused with the reader's reason", async ({ harness: page }) => {
  mkdirSync(TEST_MODELS_DIR, { recursive: true });
  const cases: Array<{ name: string; bytes: Buffer; reason: RegExp }> = [
    { name: "corrupt-magic.gguf", bytes: ggufHeader("GGUX", 0n, 0n), reason: /not a GGUF file/ },
    { name: "corrupt-tensor-count.gguf", bytes: ggufHeader("GGUF", 1n << 40n, 0n), reason: /tensor count/ },
    // The real model's header, cut off inside its metadata (the tokenizer alone is megabytes).
    { name: "corrupt-truncated.gguf", bytes: head(DEFAULT_MODEL_FILE, 1 << 20), reason: /truncated/ },
  ];
  for (const { name, bytes, reason } of cases) {
    await test.step(`load ${name}`, async () => {
      writeFileSync(testModelFile(name), bytes);
      const { outcome } = await tryLoadEngine(page, { model: testModelUrl(name) });
      expect(outcome.ok, "createEngine rejected").toBe(false);
      if (outcome.ok) return;
      expect(outcome.error.name).toBe("ModelFormatError");
      expect(outcome.error.isNamedClass).toBe(true);
      expect(outcome.error.message).toMatch(reason);
    });
  }
});

test("a model URL that does not exist is refused with its HTTP status", async ({ harness: page }) => {
  const { outcome } = await tryLoadEngine(page, { model: "/models/missing.gguf" });
  expect(outcome.ok, "createEngine rejected").toBe(false);
  if (outcome.ok) return;
  expect(outcome.error.name).toBe("ModelFetchError");
  expect(outcome.error.isNamedClass).toBe(true);
  expect(outcome.error.message).toMatch(/404/);
});

test("after the GPU device is lost, the next request reloads the model and answers the same", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: testModelUrl(TINY_MODEL) });
  const request = { prompt: "Hello, world", max_tokens: 16, temperature: 0 };

  const reference = await test.step("a greedy answer", async () => {
    const r = await engine.complete(request);
    expect(r.tokens.length).toBeGreaterThan(0);
    expect(await engine.reloads()).toBe(0);
    return r;
  });

  await test.step("lose the device", () => engine.destroyDevice());

  await test.step("ask again: the same answer, after one reload", async () => {
    const again = await engine.complete(request);
    expect(again.tokens).toEqual(reference.tokens);
    expect(again.choices[0].text).toBe(reference.choices[0].text);
    expect(await engine.reloads()).toBe(1);
  });
});
