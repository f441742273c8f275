// The prefix benchmark in the browser (DESIGN.md's protocol, bench_protocol.json's texts and
// lengths): for each prefix length, radixlm cold (both tiers empty), warm (the prefix ran just
// before, on the GPU), restored (the prefix was written to IndexedDB, then the page reloaded:
// a new worker and an empty GPU tier), and the suffix-alone control; wllama cold and warm (its
// slot's cache of the previous prompt) on the same texts, same model, same browser. Paths are
// interleaved over the repeats; the first repeat decodes check_tokens greedy tokens for the
// controls, later ones one token.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts prefix
//   RADIXLM_BENCH_SIZE=smoke (one length, one repeat) · RADIXLM_BENCH_LONG=1 (adds 2048, 4096)
//
// Correctness is part of every number: radixlm's warm tokens must equal cold's and restored's
// must equal them or part only at a near tie, both must differ from the control's, warm must
// have reused and restored must have restored the prefix, and every timed run's first token
// must equal cold's. A failed control names itself, voids its row and fails the run.

import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import { ttftChart } from "./chart";
import { benchBackend, benchThreads, describe, RadixlmEngine, runEnvironment, WllamaEngine, type Run, type RunEnvironment } from "./engines";
import { agreement, benchSize, median, percentile, PROTOCOL, resultsDir } from "./protocol";

interface PathTimes {
  ttftMs: number[];
  median: number;
  p95: number;
}

interface Row {
  prefixTokens: number;
  deltaTokens: number;
  radixlm: {
    cold: PathTimes;
    warm: PathTimes;
    restored: PathTimes;
    prefilled: { cold: number; warm: number; restored: number };
    reusedWarm: number;
    restoredTokens: number;
    restoredVsCold: string;
    warmSpeedup: number | null;
    restoredSpeedup: number | null;
  };
  wllama: {
    cold: PathTimes;
    warm: PathTimes;
    prefilled: { cold: number; warm: number };
    reusedWarm: number;
    /** How wllama's greedy text compares with radixlm's cold text (the engines' numerics differ). */
    agreement: string;
  };
  failedControl: string | null;
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

test("prefix: TTFT cold, warm and restored, radixlm beside wllama, with correctness controls", async ({ browser }) => {
  const { prefixLens, repeats, smoke } = benchSize();
  const check = PROTOCOL.check_tokens;
  // One context: the tabs share the origin's Cache API (the model) and IndexedDB (spilled pages).
  const context = await browser.newContext();
  const radix = new RadixlmEngine(await context.newPage(), benchBackend(), benchThreads());
  const wllama = new WllamaEngine(await context.newPage(), benchThreads());
  const errors: string[] = [];
  for (const page of context.pages()) page.on("pageerror", (e) => errors.push(`${e.name}: ${e.message}`));

  const radixLoadMs = await radix.open();
  const wllamaLoadMs = await wllama.open();
  const pageSize = await radix.pageSize();
  // Token counts of one copy of the filler and of the question (each run alone: ± a BOS token).
  const fillerTokens = (await radix.complete(PROTOCOL.filler, 1)).promptTokens;
  const questionTokens = (await radix.complete(PROTOCOL.question, 1)).promptTokens;
  const suffix = repeatTo(PROTOCOL.question, questionTokens, PROTOCOL.delta);

  const rows: Row[] = [];
  /** radixlm's loads after a page reload: the model from the Cache API. */
  const reloadMs: number[] = [];
  for (const p of prefixLens) {
    const prefix = repeatTo(PROTOCOL.filler, fillerTokens, p);
    const prompt = prefix + suffix;
    const failures: string[] = [];
    const fail = (why: string) => failures.push(why);

    // radixlm's paths, each set up untimed, then timed.
    const cold = async (n: number) => (await radix.forget(), radix.complete(prompt, n));
    const warm = async (n: number) => {
      await radix.forget();
      await radix.complete(prefix, 1);
      return radix.complete(prompt, n);
    };
    const restored = async (n: number, prefixTokens: number) => {
      await radix.forget();
      await radix.complete(prefix, 1);
      await radix.writtenBehind(Math.floor(prefixTokens / pageSize));
      reloadMs.push(await radix.reload());
      return radix.complete(prompt, n);
    };
    const wllamaCold = async (n: number) => (await wllama.forget(), wllama.complete(prompt, n));
    const wllamaWarm = async (n: number) => {
      await wllama.complete(prefix, 1);
      return wllama.complete(prompt, n);
    };

    const rc: Run[] = [];
    const rw: Run[] = [];
    const rr: Run[] = [];
    const wc: Run[] = [];
    const ww: Run[] = [];
    let control: Run | undefined;
    let prefixTokens = 0;
    for (let r = 0; r < repeats; r++) {
      const n = r === 0 ? check : 1;
      rc.push(await cold(n));
      const first = rc[0] as Run;
      if (r === 0) {
        await radix.forget();
        control = await radix.complete(suffix, check);
        prefixTokens = first.promptTokens - control.promptTokens;
      }
      rw.push(await warm(n));
      rr.push(await restored(n, prefixTokens));
      // radixlm writes pages behind while idle: let it finish before timing the other engine.
      await radix.writtenBehind(0);
      wc.push(await wllamaCold(n));
      ww.push(await wllamaWarm(n));
      for (const [name, run] of [["cold", rc.at(-1)], ["warm", rw.at(-1)], ["restored", rr.at(-1)]] as const) {
        if (run?.tokens[0] !== first.tokens[0]) fail(`repeat ${r + 1}: radixlm ${name}'s first token differs from cold's`);
      }
    }
    const [c, w, rs, wcold] = [rc[0], rw[0], rr[0], wc[0]] as Run[];
    if (!c || !w || !rs || !wcold || !control) throw new Error("no check runs");
    if (c.reusedTokens + c.restoredTokens !== 0) fail("radixlm cold reused or restored tokens: the cache was not empty");
    if (w.reusedTokens < prefixTokens - pageSize) fail(`radixlm warm reused ${w.reusedTokens} of the prefix's ${prefixTokens} tokens`);
    if (w.tokens.join() !== c.tokens.join()) fail(`radixlm warm greedy ${check} tokens differ from cold`);
    if (w.tokens.join() === control.tokens.join()) fail("radixlm warm greedy tokens equal the suffix-alone control (prefix context lost)");
    const restoredAgreement = agreement(c.tokens, c.gaps, rs.tokens);
    if (rs.restoredTokens === 0) fail("radixlm restored nothing from IndexedDB");
    else if (!restoredAgreement.passes) fail(`radixlm restored greedy tokens differ from cold: ${restoredAgreement.text}`);
    else if (rs.tokens.join() === control.tokens.join()) fail("radixlm restored greedy tokens equal the suffix-alone control (prefix context lost)");
    if (ww[0] && ww[0].reusedTokens === 0) fail("wllama warm reused nothing from its cache");
    for (const run of wc) if (run.reusedTokens > 1) fail(`wllama cold reused ${run.reusedTokens} tokens: its cache was not empty`);
    const shared = commonPrefix(c.text, wcold.text);

    const ok = failures.length === 0;
    const [cT, wT, rT] = [times(rc.map((x) => x.ttftMs)), times(rw.map((x) => x.ttftMs)), times(rr.map((x) => x.ttftMs))];
    rows.push({
      prefixTokens,
      deltaTokens: c.promptTokens - prefixTokens,
      radixlm: {
        cold: cT,
        warm: wT,
        restored: rT,
        prefilled: { cold: c.prefilledTokens, warm: w.prefilledTokens, restored: rs.prefilledTokens },
        reusedWarm: w.reusedTokens,
        restoredTokens: rs.restoredTokens,
        restoredVsCold: restoredAgreement.text,
        warmSpeedup: ok ? cT.median / wT.median : null,
        restoredSpeedup: ok ? cT.median / rT.median : null,
      },
      wllama: {
        cold: times(wc.map((x) => x.ttftMs)),
        warm: times(ww.map((x) => x.ttftMs)),
        prefilled: { cold: wcold.prefilledTokens, warm: ww[0]?.prefilledTokens ?? 0 },
        reusedWarm: ww[0]?.reusedTokens ?? 0,
        agreement:
          shared === c.text.length && shared === wcold.text.length
            ? `the same ${check}-token text`
            : `the first ${shared} of ${c.text.length} characters equal`,
      },
      failedControl: ok ? null : failures.join("; "),
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
    radixlmBackend: radix.backend,
    radixlmThreads: radix.threads,
    loadMs: { radixlm: radixLoadMs, wllama: wllamaLoadMs, radixlmFromCacheMedian: median(reloadMs) },
    wllamaThreads: wllama.threads,
    rows,
  };
  const table = markdown(result);
  console.log(`\n${table}`);
  const out = resultsDir();
  const name = smoke ? "prefix-smoke" : "prefix";
  writeFileSync(path.join(out, `${name}.json`), JSON.stringify(result, null, 2) + "\n");
  writeFileSync(path.join(out, `${name}.md`), table);
  // A row with a failed control has no figures, in the chart as in the table.
  const valid = rows.filter((row) => row.failedControl === null);
  const line = (pick: (row: Row) => PathTimes): Array<[number, number]> => valid.map((row) => [row.prefixTokens, pick(row).median]);
  const chart = ttftChart(`TTFT (median), ${env.model}, ${env.browser}, ${env.adapter}`, [
    { name: `${radix.name} cold`, color: "#2457c5", points: line((row) => row.radixlm.cold) },
    { name: `${radix.name} warm`, color: "#1b9e5a", points: line((row) => row.radixlm.warm) },
    { name: `${radix.name} restored`, color: "#8e44ad", points: line((row) => row.radixlm.restored) },
    { name: "wllama cold", color: "#c0392b", dashed: true, points: line((row) => row.wllama.cold) },
    { name: "wllama warm", color: "#e67e22", dashed: true, points: line((row) => row.wllama.warm) },
  ]);
  writeFileSync(path.join(out, `${name}.svg`), chart);
  await context.close();

  expect(errors, "uncaught errors in the tabs").toEqual([]);
  for (const row of rows) expect(row.failedControl, `prefix ${row.prefixTokens}`).toBeNull();
});

function markdown(r: RunEnvironment & {
  repeats: number;
  radixlmBackend: string;
  radixlmThreads: number;
  checkTokens: number;
  loadMs: { radixlm: number; wllama: number; radixlmFromCacheMedian: number };
  wllamaThreads: number;
  rows: Row[];
}): string {
  const ms = (t: PathTimes) => `${t.median.toFixed(0)} / ${t.p95.toFixed(0)}`;
  const x = (v: number | null) => (v === null ? "—" : `${v.toFixed(1)}×`);
  const lines = [
    `${describe(r)} · ${r.repeats} repeat(s), controls over ${r.checkTokens} greedy tokens`,
    `radixlm on ${r.radixlmBackend === "cpu" ? `its CPU backend (wasm SIMD, ${r.radixlmThreads} thread${r.radixlmThreads === 1 ? "" : "s"})` : "WebGPU"}; wllama (llama.cpp in wasm) on the CPU, ${r.wllamaThreads} thread${r.wllamaThreads === 1 ? "" : "s"}. First load of the model in this run: radixlm ${r.loadMs.radixlm.toFixed(0)} ms, wllama ${r.loadMs.wllama.toFixed(0)} ms; radixlm after a reload (from the Cache API): ${r.loadMs.radixlmFromCacheMedian.toFixed(0)} ms (median)`,
    "",
    "TTFT in ms (median / p95), measured in the page from the request to the first streamed text.",
    "",
    "| prefix | delta | radixlm cold | radixlm warm | radixlm restored | warm speedup | restored speedup | radixlm prefilled cold / warm / restored | restored tokens | restored vs cold | wllama cold | wllama warm | wllama prefilled cold / warm | wllama vs radixlm | controls |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|",
  ];
  for (const row of r.rows) {
    const k = row.radixlm;
    const w = row.wllama;
    if (row.failedControl) {
      lines.push(`| ${row.prefixTokens} | ${row.deltaTokens} | void | void | void | — | — | — | — | ${k.restoredVsCold} | void | void | — | ${w.agreement} | FAIL: ${row.failedControl} |`);
      continue;
    }
    lines.push(
      `| ${row.prefixTokens} | ${row.deltaTokens} | ${ms(k.cold)} | ${ms(k.warm)} | ${ms(k.restored)} | ${x(k.warmSpeedup)} | ${x(k.restoredSpeedup)} | ${k.prefilled.cold} / ${k.prefilled.warm} / ${k.prefilled.restored} | ${k.restoredTokens} | ${k.restoredVsCold} | ${ms(w.cold)} | ${ms(w.warm)} | ${w.prefilled.cold} / ${w.prefilled.warm} | ${w.agreement} | pass |`,
    );
  }
  return lines.join("\n") + "\n";
}
