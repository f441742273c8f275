// Raw speed beside the peer, in the same run: prefill tokens/s over a 512-token prompt, decode
// tokens/s over 128 greedy tokens (as each engine reports them), and the time to load the model
// when it is already on the device (radixlm: from the Cache API after a reload; wllama: from its
// own cache), for radixlm on its CPU backend (2 threads and 1) and on WebGPU, and wllama (llama.cpp
// in wasm) on 2 threads and on 1, all in cross-origin-isolated tabs.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts speed
//   RADIXLM_BENCH_SIZE=smoke: 128 and 32 tokens, one repeat
//   RADIXLM_BENCH_BACKEND=cpu: radixlm's CPU backend only (no WebGPU row)
//   RADIXLM_BENCH_MODEL=/models/...: another model for every engine

import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import { benchBackends, describe, RadixlmEngine, runEnvironment, WllamaEngine, type BenchEngine } from "./engines";
import { benchSize, median, PROTOCOL, resultsDir } from "./protocol";

test("speed: prefill and decode tokens/s and load time, radixlm (CPU and WebGPU) beside wllama", async ({ browser }) => {
  const { smoke } = benchSize();
  const [prefillTokens, decodeTokens, repeats] = smoke ? [128, 32, 1] : [512, 128, 3];
  const prompt = PROTOCOL.filler.repeat(Math.ceil(prefillTokens / 37));
  const context = await browser.newContext();
  const radixCpu = new RadixlmEngine(await context.newPage(), "cpu");
  const radixCpuOne = new RadixlmEngine(await context.newPage(), "cpu", 1);
  const wllama = new WllamaEngine(await context.newPage());
  const wllamaOne = new WllamaEngine(await context.newPage(), 1);
  const engines: BenchEngine[] = [radixCpu, radixCpuOne, wllama, wllamaOne];
  if (benchBackends().includes("webgpu")) engines.push(new RadixlmEngine(await context.newPage(), "webgpu"));
  for (const engine of engines) await engine.open();

  const rows: Array<{ engine: string; promptTokens: number; generated: number[]; prefill: number[]; decode: number[]; loadMs: number[] }> = [];
  for (const engine of engines) {
    const row = { engine: engine.name, promptTokens: 0, generated: [] as number[], prefill: [] as number[], decode: [] as number[], loadMs: [] as number[] };
    for (let r = 0; r < repeats; r++) {
      await engine.forget();
      if (engine instanceof RadixlmEngine) await engine.writtenBehind(0);
      const run = await engine.complete(prompt, decodeTokens);
      expect(run.reusedTokens + run.restoredTokens, `${engine.name} prefilled its whole prompt`).toBeLessThanOrEqual(1);
      row.promptTokens = run.promptTokens;
      row.generated.push(run.generatedTokens);
      row.prefill.push(run.prefillTokensPerS);
      row.decode.push(run.decodeTokensPerS);
      // The model is on the device now: load it again as a returning page would.
      row.loadMs.push(engine instanceof RadixlmEngine ? await engine.reload() : await engine.open());
    }
    rows.push(row);
  }
  const env = await runEnvironment(context);
  await context.close();

  const lines = [
    describe(env),
    "",
    `Speed: a ${rows[0]?.promptTokens ?? prefillTokens}-token prompt, up to ${decodeTokens} greedy tokens, median of ${repeats}; load = the model already on the device. radixlm (CPU) on ${radixCpu.threads} and ${radixCpuOne.threads} threads, wllama on ${wllama.threads} and ${wllamaOne.threads}.`,
    "",
    "| engine | prefill tok/s | decode tok/s | tokens decoded | load ms |",
    "|---|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.engine} | ${median(r.prefill).toFixed(1)} | ${median(r.decode).toFixed(1)} | ${r.generated.join(", ")} | ${median(r.loadMs).toFixed(0)} |`),
  ];
  // The goals: radixlm's CPU backend at least 2x wllama's prefill and 1.5x its decode, thread for thread.
  const byName = new Map(rows.map((r) => [r.engine, r]));
  for (const [ours, theirs] of [[radixCpu, wllama], [radixCpuOne, wllamaOne]] as const) {
    const a = byName.get(ours.name);
    const b = byName.get(theirs.name);
    if (!a || !b) continue;
    const ratio = (f: (r: (typeof rows)[number]) => number[]) => (median(f(a)) / median(f(b))).toFixed(2);
    lines.push("", `On ${ours.threads} thread${ours.threads === 1 ? "" : "s"} each, radixlm's CPU backend / wllama: prefill ${ratio((r) => r.prefill)}x, decode ${ratio((r) => r.decode)}x.`);
  }
  const table = lines.join("\n") + "\n";
  console.log(`\n${table}`);
  const out = resultsDir();
  const name = smoke ? "speed-smoke" : "speed";
  writeFileSync(path.join(out, `${name}.json`), JSON.stringify({ benchmark: "speed", size: smoke ? "smoke" : "full", ...env, prefillTokens, decodeTokens, repeats, radixlmThreads: [radixCpu.threads, radixCpuOne.threads], wllamaThreads: [wllama.threads, wllamaOne.threads], rows }, null, 2) + "\n");
  writeFileSync(path.join(out, `${name}.md`), table);
});
