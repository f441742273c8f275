// The prefix benchmark in the browser (DESIGN.md's protocol, bench_protocol.json's texts and
// lengths): for each prefix length and each radixlm backend (CPU and WebGPU, each in a browser
// context of its own), cold (both tiers empty), warm (the prefix ran just before, held in the
// backend's memory), restored (the prefix was written to IndexedDB, then the page reloaded: a new
// worker and an empty memory tier), and the suffix-alone control; wllama cold and warm (its slot's
// cache of the previous prompt) on the same texts, same model, same browser. Engines are
// interleaved over the repeats; the first repeat decodes check_tokens greedy tokens for the
// controls, later ones one token.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts prefix
//   RADIXLM_BENCH_SIZE=smoke (one length, one repeat) · RADIXLM_BENCH_LONG=1 (adds 2048, 4096)
//   RADIXLM_BENCH_BACKEND=cpu|webgpu|cpu,webgpu · RADIXLM_BENCH_THREADS=N · RADIXLM_BENCH_REPEATS=N
//
// Correctness is part of every number: each backend's warm tokens must equal its cold's and its
// restored's must equal them or part only at a near tie, both must differ from the control's,
// warm must have reused and restored must have restored the prefix, and every timed run's first
// token must equal cold's. A failed control names itself, voids its row and fails the run.

import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test, type BrowserContext } from "@playwright/test";
import { ttftChart, type Series } from "./chart";
import { benchBackends, benchThreads, describe, RadixlmEngine, runEnvironment, WllamaEngine, type Run, type RunEnvironment } from "./engines";
import { agreement, benchSize, median, percentile, PROTOCOL, resultsDir } from "./protocol";

interface PathTimes {
  ttftMs: number[];
  median: number;
  p95: number;
}

/** One radixlm backend's paths at one prefix length. */
interface RadixlmRow {
  engine: string;
  backend: string;
  threads: number;
  cold: PathTimes;
  warm: PathTimes;
  restored: PathTimes;
  prefilled: { cold: number; warm: number; restored: number };
  reusedWarm: number;
  restoredTokens: number;
  restoredVsCold: string;
  warmSpeedup: number | null;
  restoredSpeedup: number | null;
  /** Null when every control passed; else what failed (the row's figures are void). */
  failedControl: string | null;
}

interface Row {
  prefixTokens: number;
  deltaTokens: number;
  radixlm: RadixlmRow[];
  wllama: {
    cold: PathTimes;
    warm: PathTimes;
    prefilled: { cold: number; warm: number };
    reusedWarm: number;
    /** How wllama's greedy text compares with the first radixlm backend's cold text (the engines' numerics differ). */
    agreement: string;
    failedControl: string | null;
  };
}

const times = (xs: number[]): PathTimes => ({ ttftMs: xs, median: median(xs), p95: percentile(xs, 95) });

/** The filler repeated to at least `tokens` tokens, given one copy's count. */
const repeatTo = (unit: string, unitTokens: number, tokens: number) => unit.repeat(Math.max(1, Math.ceil(tokens / unitTokens)));

/** Characters two texts share from the start. */
function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** One radixlm engine's timed paths at one prefix length, and the runs its controls read. */
class RadixlmPaths {
  readonly cold: Run[] = [];
  readonly warm: Run[] = [];
  readonly restored: Run[] = [];
  control: Run | undefined;
  readonly failures: string[] = [];

  constructor(
    readonly engine: RadixlmEngine,
    private readonly prefix: string,
    private readonly prompt: string,
    private readonly suffix: string,
    private readonly reloadMs: number[],
  ) {}

  /** One repeat of cold, warm and restored (and, the first time, the suffix-alone control), each set up untimed. */
  async repeat(r: number, n: number, pageSize: number): Promise<void> {
    const radix = this.engine;
    await radix.forget();
    this.cold.push(await radix.complete(this.prompt, n));
    if (r === 0) {
      await radix.forget();
      this.control = await radix.complete(this.suffix, n);
    }
    await radix.forget();
    await radix.complete(this.prefix, 1);
    this.warm.push(await radix.complete(this.prompt, n));
    await radix.forget();
    await radix.complete(this.prefix, 1);
    await radix.writtenBehind(Math.floor(this.prefixTokens() / pageSize));
    this.reloadMs.push(await radix.reload());
    this.restored.push(await radix.complete(this.prompt, n));
    // radixlm writes pages behind while idle: let it finish before timing another engine.
    await radix.writtenBehind(0);
    const first = this.cold[0] as Run;
    for (const [name, run] of [["cold", this.cold.at(-1)], ["warm", this.warm.at(-1)], ["restored", this.restored.at(-1)]] as const) {
      if (run?.tokens[0] !== first.tokens[0]) this.failures.push(`repeat ${r + 1}: ${name}'s first token differs from cold's`);
    }
  }

  prefixTokens(): number {
    const [c, control] = [this.cold[0], this.control];
    return c && control ? c.promptTokens - control.promptTokens : 0;
  }

  row(pageSize: number): RadixlmRow {
    const [c, w, rs, control] = [this.cold[0], this.warm[0], this.restored[0], this.control];
    if (!c || !w || !rs || !control) throw new Error(`${this.engine.name}: no check runs`);
    const fail = (why: string) => this.failures.push(why);
    const prefixTokens = this.prefixTokens();
    if (c.reusedTokens + c.restoredTokens !== 0) fail("cold reused or restored tokens: the cache was not empty");
    if (w.reusedTokens < prefixTokens - pageSize) fail(`warm reused ${w.reusedTokens} of the prefix's ${prefixTokens} tokens`);
    if (w.tokens.join() !== c.tokens.join()) fail(`warm greedy ${c.tokens.length} tokens differ from cold`);
    if (w.tokens.join() === control.tokens.join()) fail("warm greedy tokens equal the suffix-alone control (prefix context lost)");
    const restoredAgreement = agreement(c.tokens, c.gaps, rs.tokens);
    if (rs.restoredTokens === 0) fail("restored nothing from IndexedDB");
    else if (!restoredAgreement.passes) fail(`restored greedy tokens differ from cold: ${restoredAgreement.text}`);
    else if (rs.tokens.join() === control.tokens.join()) fail("restored greedy tokens equal the suffix-alone control (prefix context lost)");
    const ok = this.failures.length === 0;
    const [cT, wT, rT] = [times(this.cold.map((x) => x.ttftMs)), times(this.warm.map((x) => x.ttftMs)), times(this.restored.map((x) => x.ttftMs))];
    return {
      engine: this.engine.name,
      backend: this.engine.backend,
      threads: this.engine.threads,
      cold: cT,
      warm: wT,
      restored: rT,
      prefilled: { cold: c.prefilledTokens, warm: w.prefilledTokens, restored: rs.prefilledTokens },
      reusedWarm: w.reusedTokens,
      restoredTokens: rs.restoredTokens,
      restoredVsCold: restoredAgreement.text,
      warmSpeedup: ok ? cT.median / wT.median : null,
      restoredSpeedup: ok ? cT.median / rT.median : null,
      failedControl: ok ? null : this.failures.join("; "),
    };
  }
}

test("prefix: TTFT cold, warm and restored, radixlm (CPU and WebGPU) beside wllama, with correctness controls", async ({ browser }) => {
  const { prefixLens, repeats, smoke } = benchSize();
  const check = PROTOCOL.check_tokens;
  // Each radixlm backend in a context of its own: its own Cache API (the model) and IndexedDB
  // (spilled pages), as two sites would have; wllama beside the first.
  const contexts = await Promise.all(benchBackends().map(() => browser.newContext()));
  const radixes = await Promise.all(benchBackends().map(async (backend, i) => new RadixlmEngine(await (contexts[i] as BrowserContext).newPage(), backend, benchThreads())));
  const context = contexts[0] as BrowserContext;
  const wllama = new WllamaEngine(await context.newPage(), benchThreads());
  const errors: string[] = [];
  for (const c of contexts) for (const page of c.pages()) page.on("pageerror", (e) => errors.push(`${e.name}: ${e.message}`));

  const loadMs: Record<string, number> = {};
  for (const engine of [...radixes, wllama]) loadMs[engine.name] = await engine.open();
  const radix = radixes[0] as RadixlmEngine;
  const pageSize = await radix.pageSize();
  // Token counts of one copy of the filler and of the question (each run alone: ± a BOS token).
  const fillerTokens = (await radix.complete(PROTOCOL.filler, 1)).promptTokens;
  const questionTokens = (await radix.complete(PROTOCOL.question, 1)).promptTokens;
  const suffix = repeatTo(PROTOCOL.question, questionTokens, PROTOCOL.delta);

  const rows: Row[] = [];
  /** radixlm's loads after a page reload, by engine: the model from the Cache API. */
  const reloadMs = new Map(radixes.map((r) => [r.name, [] as number[]]));
  for (const p of prefixLens) {
    const prefix = repeatTo(PROTOCOL.filler, fillerTokens, p);
    const prompt = prefix + suffix;
    const paths = radixes.map((r) => new RadixlmPaths(r, prefix, prompt, suffix, reloadMs.get(r.name) as number[]));
    const wllamaCold = async (n: number) => (await wllama.forget(), wllama.complete(prompt, n));
    const wllamaWarm = async (n: number) => {
      await wllama.complete(prefix, 1);
      return wllama.complete(prompt, n);
    };
    const wc: Run[] = [];
    const ww: Run[] = [];
    // Engines interleaved over the repeats.
    for (let r = 0; r < repeats; r++) {
      const n = r === 0 ? check : 1;
      for (const path of paths) await path.repeat(r, n, pageSize);
      wc.push(await wllamaCold(n));
      ww.push(await wllamaWarm(n));
    }
    const radixRows = paths.map((path) => path.row(pageSize));
    const prefixTokens = (paths[0] as RadixlmPaths).prefixTokens();
    for (const path of paths.slice(1)) {
      if (path.prefixTokens() !== prefixTokens) throw new Error(`${path.engine.name} counts ${path.prefixTokens()} prefix tokens, ${radix.name} ${prefixTokens}`);
    }
    const c = (paths[0] as RadixlmPaths).cold[0] as Run;
    const wcold = wc[0] as Run;
    const wllamaFailures: string[] = [];
    if (ww[0] && ww[0].reusedTokens === 0) wllamaFailures.push("wllama warm reused nothing from its cache");
    for (const run of wc) if (run.reusedTokens > 1) wllamaFailures.push(`wllama cold reused ${run.reusedTokens} tokens: its cache was not empty`);
    const shared = commonPrefix(c.text, wcold.text);
    rows.push({
      prefixTokens,
      deltaTokens: c.promptTokens - prefixTokens,
      radixlm: radixRows,
      wllama: {
        cold: times(wc.map((x) => x.ttftMs)),
        warm: times(ww.map((x) => x.ttftMs)),
        prefilled: { cold: wcold.prefilledTokens, warm: ww[0]?.prefilledTokens ?? 0 },
        reusedWarm: ww[0]?.reusedTokens ?? 0,
        agreement: shared === c.text.length && shared === wcold.text.length ? `the same ${check}-token text` : `the first ${shared} of ${c.text.length} characters equal`,
        failedControl: wllamaFailures.length ? wllamaFailures.join("; ") : null,
      },
    });
  }

  const env = await runEnvironment(context);
  const result = {
    benchmark: "prefix",
    size: smoke ? "smoke" : "full",
    ...env,
    repeats,
    checkTokens: check,
    pageSize,
    radixlm: radixes.map((r) => ({ engine: r.name, backend: r.backend, threads: r.threads, loadMs: loadMs[r.name], fromCacheMedianMs: median(reloadMs.get(r.name) ?? []) })),
    wllama: { engine: wllama.name, threads: wllama.threads, loadMs: loadMs[wllama.name] },
    rows,
  };
  const table = markdown(result);
  console.log(`\n${table}`);
  const out = resultsDir();
  const name = smoke ? "prefix-smoke" : "prefix";
  writeFileSync(path.join(out, `${name}.json`), JSON.stringify(result, null, 2) + "\n");
  writeFileSync(path.join(out, `${name}.md`), table);
  // A row with a failed control has no figures, in the chart as in the table.
  const line = (pick: (row: Row) => PathTimes | null): Array<[number, number]> =>
    rows.flatMap((row): Array<[number, number]> => {
      const t = pick(row);
      return t ? [[row.prefixTokens, t.median]] : [];
    });
  const palette = [
    ["#2457c5", "#1b9e5a", "#8e44ad"],
    ["#5d8ae8", "#58c98c", "#b783cc"],
  ];
  const series: Series[] = radixes.flatMap((r, i): Series[] => {
    const [cold, warm, restored] = palette[i % palette.length] as string[];
    const mine = (row: Row) => row.radixlm.find((x) => x.engine === r.name && x.failedControl === null);
    return [
      { name: `${r.name} cold`, color: cold as string, dashed: i > 0, points: line((row) => mine(row)?.cold ?? null) },
      { name: `${r.name} warm`, color: warm as string, dashed: i > 0, points: line((row) => mine(row)?.warm ?? null) },
      { name: `${r.name} restored`, color: restored as string, dashed: i > 0, points: line((row) => mine(row)?.restored ?? null) },
    ];
  });
  const wOk = (row: Row) => row.wllama.failedControl === null;
  series.push(
    { name: `${wllama.name} cold`, color: "#c0392b", dashed: true, points: line((row) => (wOk(row) ? row.wllama.cold : null)) },
    { name: `${wllama.name} warm`, color: "#e67e22", dashed: true, points: line((row) => (wOk(row) ? row.wllama.warm : null)) },
  );
  writeFileSync(path.join(out, `${name}.svg`), ttftChart(`TTFT (median), ${env.model}, ${env.browser}, ${env.adapter}`, series));
  for (const c of contexts) await c.close();

  expect(errors, "uncaught errors in the tabs").toEqual([]);
  for (const row of rows) {
    for (const k of row.radixlm) expect(k.failedControl, `prefix ${row.prefixTokens}, ${k.engine}`).toBeNull();
    expect(row.wllama.failedControl, `prefix ${row.prefixTokens}, wllama`).toBeNull();
  }
});

function markdown(r: RunEnvironment & {
  repeats: number;
  checkTokens: number;
  radixlm: Array<{ engine: string; backend: string; threads: number; loadMs: number | undefined; fromCacheMedianMs: number }>;
  wllama: { engine: string; threads: number; loadMs: number | undefined };
  rows: Row[];
}): string {
  const ms = (t: PathTimes) => `${t.median.toFixed(0)} / ${t.p95.toFixed(0)}`;
  const x = (v: number | null) => (v === null ? "—" : `${v.toFixed(1)}×`);
  const plural = (n: number) => `${n} thread${n === 1 ? "" : "s"}`;
  const loads = r.radixlm.map((k) => `${k.engine} ${k.loadMs?.toFixed(0)} ms (after a reload, from the Cache API: ${k.fromCacheMedianMs.toFixed(0)} ms median)`);
  const lines = [
    `${describe(r)} · ${r.repeats} repeat(s), controls over ${r.checkTokens} greedy tokens`,
    `${r.radixlm.map((k) => (k.backend === "cpu" ? `${k.engine}: its CPU backend (wasm SIMD, ${plural(k.threads)})` : `${k.engine}: WebGPU`)).join("; ")}; ${r.wllama.engine}: llama.cpp in wasm on the CPU, ${plural(r.wllama.threads)}. First load of the model in this run: ${loads.join(", ")}, ${r.wllama.engine} ${r.wllama.loadMs?.toFixed(0)} ms.`,
    "",
    "TTFT in ms (median / p95), measured in the page from the request to the first streamed text; prefilled = prompt tokens computed.",
    "",
    "| prefix | delta | engine | cold | warm | restored | warm speedup | restored speedup | prefilled cold / warm / restored | restored tokens | greedy text | controls |",
    "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
  ];
  for (const row of r.rows) {
    const lead = `| ${row.prefixTokens} | ${row.deltaTokens}`;
    for (const k of row.radixlm) {
      const restored = `restored vs cold: ${k.restoredVsCold}`;
      lines.push(
        k.failedControl
          ? `${lead} | ${k.engine} | void | void | void | — | — | — | — | ${restored} | FAIL: ${k.failedControl} |`
          : `${lead} | ${k.engine} | ${ms(k.cold)} | ${ms(k.warm)} | ${ms(k.restored)} | ${x(k.warmSpeedup)} | ${x(k.restoredSpeedup)} | ${k.prefilled.cold} / ${k.prefilled.warm} / ${k.prefilled.restored} | ${k.restoredTokens} | ${restored} | pass |`,
      );
    }
    const w = row.wllama;
    const vs = `vs ${r.radixlm[0]?.engine} cold: ${w.agreement}`;
    lines.push(
      w.failedControl
        ? `${lead} | ${r.wllama.engine} | void | void | — | — | — | — | — | ${vs} | FAIL: ${w.failedControl} |`
        : `${lead} | ${r.wllama.engine} | ${ms(w.cold)} | ${ms(w.warm)} | — | ${x(w.cold.median / w.warm.median)} | — | ${w.prefilled.cold} / ${w.prefilled.warm} / — | — | ${vs} | pass |`,
    );
  }
  return lines.join("\n") + "\n";
}
