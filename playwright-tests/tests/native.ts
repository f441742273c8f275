// The native CLI as the reference for the browser's greedy output.

import { execFileSync } from "node:child_process";
import { CLI, REPO_ROOT } from "../paths";

/** What `radixlm generate --json` prints (one line of JSON on stdout). */
export interface NativeGeneration {
  prompt_ids: number[];
  tokens: number[];
  /** top2_gaps[i]: the native top-1 minus top-2 logit at step i. */
  top2_gaps: number[];
  text: string;
  finish_reason: string;
}

/**
 * Greedy generation by the native engine on `opts.model` (a file; the default model when absent),
 * on the backend the browser run used: the GPU (wgpu on the machine's adapter) or the CPU.
 */
export function nativeGenerate(prompt: string, opts: { chat: boolean; system?: string; maxTokens: number; model?: string; backend: "webgpu" | "cpu" }): NativeGeneration {
  const backend = opts.backend === "cpu" ? "cpu" : "gpu";
  const args = ["generate", "--backend", backend, "--no-spill", "--json", "--max-tokens", String(opts.maxTokens), "--temperature", "0", "--prompt", prompt];
  if (opts.model) args.push("--model", opts.model);
  if (opts.chat) args.push("--chat");
  if (opts.system !== undefined) args.push("--system", opts.system);
  let stdout: string;
  try {
    stdout = execFileSync(CLI, args, { cwd: REPO_ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 300_000, maxBuffer: 16 << 20 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`${CLI} ${args.join(" ")} failed: ${err.message}\n${err.stderr ?? ""}`);
  }
  try {
    return JSON.parse(stdout.trim()) as NativeGeneration;
  } catch {
    throw new Error(`${CLI} ${args.join(" ")} did not print one line of JSON; stdout was:\n${stdout}`);
  }
}

/** Logit gap under which two engines may pick different tokens (float sums in another order). */
export const NEAR_TIE = 0.25;

export type GreedyComparison =
  | { kind: "equal" }
  /** They part at `step` where the native top-2 gap is under NEAR_TIE: the rest is not compared. */
  | { kind: "near-tie"; step: number; gap: number; browser: number | undefined; native: number | undefined }
  | { kind: "differ"; step: number; gap: number | undefined; browser: number | undefined; native: number | undefined };

/** Token-for-token comparison of a browser run with the native one, under the near-tie rule. */
export function compareGreedy(browser: readonly number[], native: NativeGeneration): GreedyComparison {
  const n = Math.max(browser.length, native.tokens.length);
  for (let i = 0; i < n; i++) {
    if (browser[i] === native.tokens[i]) continue;
    const gap = native.top2_gaps[i];
    const at = { step: i, browser: browser[i], native: native.tokens[i] };
    // Past the native run's end there is no native logit gap: a longer browser run is a real difference.
    if (gap !== undefined && i < native.tokens.length && gap < NEAR_TIE) return { kind: "near-tie", gap, ...at };
    return { kind: "differ", gap, ...at };
  }
  return { kind: "equal" };
}
