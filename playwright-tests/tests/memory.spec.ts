import { statSync } from "node:fs";
import { LLAMA_1B_SHAPE_MODEL, testModelFile, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine } from "./harness";

const MiB = 1 << 20;
/** What a phone browser tab can be expected to spare for the wasm heap. */
const WASM_MEMORY_LIMIT = 256 * MiB;

test("a model of Llama-3.2-1B's size loads and generates with under 256 MiB of wasm memory", async ({ harness: page }, testInfo) => {
  // Hundreds of MB onto a CPU-emulated GPU, then three tokens through 16 wide layers.
  test.setTimeout(600_000);
  const size = statSync(testModelFile(LLAMA_1B_SHAPE_MODEL)).size;
  expect(size, "the file is larger than the wasm budget, so it must stream through").toBeGreaterThan(WASM_MEMORY_LIMIT);

  const report = (when: string, bytes: number) => {
    const line = `wasm memory ${when}: ${(bytes / MiB).toFixed(1)} MiB (model file ${(size / MiB).toFixed(1)} MiB)`;
    console.log(line);
    testInfo.annotations.push({ type: "wasm memory", description: line });
  };

  const { engine } = await test.step("load the model", () => loadEngine(page, { model: testModelUrl(LLAMA_1B_SHAPE_MODEL) }));
  await test.step("wasm memory after loading", async () => {
    const bytes = await engine.wasmMemoryBytes();
    report("after load", bytes);
    expect(bytes).toBeLessThan(WASM_MEMORY_LIMIT);
  });

  await test.step("generate three tokens", async () => {
    const r = await engine.complete({ prompt: "Hello", max_tokens: 3, temperature: 0 });
    expect(r.usage.completion_tokens).toBeGreaterThan(0);
    const bytes = await engine.wasmMemoryBytes();
    report("after generating 3 tokens", bytes);
    expect(bytes).toBeLessThan(WASM_MEMORY_LIMIT);
  });
});
