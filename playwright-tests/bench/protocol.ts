// The prefix benchmark's protocol, read from the file the CLI's bench.rs reads
// (crate/src/bench_protocol.json): the same texts, lengths, repeats and near-tie rule.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { REPO_ROOT } from "../paths";

export interface Protocol {
  filler: string;
  question: string;
  prefix_lens: number[];
  long_prefix_lens: number[];
  delta: number;
  repeats: number;
  check_tokens: number;
  near_tie: number;
}

export const PROTOCOL: Protocol = JSON.parse(readFileSync(path.join(REPO_ROOT, "crate", "src", "bench_protocol.json"), "utf8")) as Protocol;

/**
 * The run's size: RADIXLM_BENCH_SIZE=smoke (what the test command runs: one prefix length, one
 * repeat, every control) or full (the protocol's lengths and repeats; RADIXLM_BENCH_LONG=1 adds
 * the long lengths, RADIXLM_BENCH_REPEATS sets the repeats).
 */
export function benchSize(): { prefixLens: number[]; repeats: number; smoke: boolean } {
  if (process.env.RADIXLM_BENCH_SIZE === "smoke") return { prefixLens: [PROTOCOL.prefix_lens[0] ?? 128], repeats: 1, smoke: true };
  const long = process.env.RADIXLM_BENCH_LONG === "1" ? PROTOCOL.long_prefix_lens : [];
  return { prefixLens: [...PROTOCOL.prefix_lens, ...long], repeats: benchRepeats(), smoke: false };
}

/** The full run's repeats: the protocol's (or a benchmark's own `fallback`), or `RADIXLM_BENCH_REPEATS` (a software GPU makes each one long; a noisy host asks for more). */
export function benchRepeats(fallback: number = PROTOCOL.repeats): number {
  const asked = Number(process.env.RADIXLM_BENCH_REPEATS ?? fallback);
  if (!Number.isInteger(asked) || asked < 1) throw new Error(`RADIXLM_BENCH_REPEATS must be a positive integer, not ${process.env.RADIXLM_BENCH_REPEATS}`);
  return asked;
}

/** Where results go: results/ (committed), or RADIXLM_BENCH_OUT (the test command's smoke run). */
export function resultsDir(): string {
  const dir = process.env.RADIXLM_BENCH_OUT ? path.resolve(process.env.RADIXLM_BENCH_OUT) : path.join(import.meta.dirname, "..", "results");
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Prints a benchmark's table and writes it and its data to `NAME.md` and `NAME.json` in resultsDir(). */
export function writeResults(name: string, table: string, data: unknown): void {
  console.log(`\n${table}\n`);
  const dir = resultsDir();
  writeFileSync(path.join(dir, `${name}.md`), `${table}\n`);
  writeFileSync(path.join(dir, `${name}.json`), `${JSON.stringify(data, null, 1)}\n`);
}

export function median(xs: number[]): number {
  return percentile(xs, 50);
}

/** Linear-interpolated percentile, as bench.rs computes it. */
export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const v = [...xs].sort((a, b) => a - b);
  const rank = (p / 100) * (v.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return (v[lo] as number) + ((v[hi] as number) - (v[lo] as number)) * (rank - lo);
}

/** How a run's greedy tokens compare with cold's: bench.rs's `Agreement`. */
export interface Agreement {
  passes: boolean;
  text: string;
}

export function agreement(cold: number[], coldGaps: number[], other: number[]): Agreement {
  const at = cold.findIndex((t, i) => other[i] !== t);
  if (at < 0 && cold.length === other.length) return { passes: true, text: `${cold.length}/${cold.length} equal` };
  const first = at < 0 ? Math.min(cold.length, other.length) : at;
  const gap = coldGaps[first] ?? Infinity;
  const tie = gap < PROTOCOL.near_tie;
  return { passes: tie, text: `${first}/${cold.length} equal, then ${tie ? "a near tie" : "a decisive step"} (cold's top-2 gap ${gap.toFixed(4)})` };
}
