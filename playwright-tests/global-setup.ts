// Runs once before the tests: checks that what they serve has been built, and writes the
// synthetic models with the native CLI (if missing) so that no two tests race to write one.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import {
  CLI,
  DEFAULT_MODEL_FILE,
  LLAMA_1B_SHAPE_MODEL,
  PKG_ENTRY,
  PKG_WASM,
  PKG_WASM_THREADS,
  REPO_ROOT,
  SMOLLM2_SHAPE_MODEL,
  TEST_MODELS_DIR,
  TINY_MODEL,
  TINY_Q4_0_MODEL,
  TINY_UNTIED_MODEL,
  testModelFile,
} from "./paths";

/** Synthetic models: file name -> `radixlm synth` arguments (before --out). */
const SYNTHETIC: Array<[string, string[]]> = [
  [TINY_MODEL, ["--preset", "tiny"]],
  [TINY_UNTIED_MODEL, ["--preset", "tiny", "--untied"]],
  [TINY_Q4_0_MODEL, ["--preset", "tiny", "--untied", "--type", "q4_0"]],
  [SMOLLM2_SHAPE_MODEL, ["--preset", "smollm2-135m", "--untied"]],
  // clap spells the type q4-0 (its value names are kebab-case).
  [LLAMA_1B_SHAPE_MODEL, ["--preset", "llama-3.2-1b", "--type", "q4_0"]],
];

function need(file: string, how: string): void {
  if (!existsSync(file)) throw new Error(`${file} is missing: ${how}`);
}

export default function globalSetup(): void {
  need(PKG_ENTRY, "build the package first (scripts/build_web.sh)");
  need(PKG_WASM, "build the wasm first (scripts/build_web.sh)");
  need(PKG_WASM_THREADS, "build the wasm first (scripts/build_web.sh)");
  need(DEFAULT_MODEL_FILE, "fetch the default model first (scripts/fetch_model.sh)");

  if (!existsSync(CLI)) {
    console.log("radixlm tests: building the native CLI (cargo build --bin radixlm)");
    execFileSync("cargo", ["build", "--bin", "radixlm"], { cwd: REPO_ROOT, stdio: "inherit" });
  }

  mkdirSync(TEST_MODELS_DIR, { recursive: true });
  for (const [name, args] of SYNTHETIC) {
    const file = testModelFile(name);
    if (existsSync(file)) continue;
    console.log(`radixlm tests: writing ${file}`);
    // Written under a temporary name and renamed, so an interrupted run leaves no half file behind.
    const partial = file.replace(/\.gguf$/, ".partial.gguf");
    rmSync(partial, { force: true });
    execFileSync(CLI, ["synth", ...args, "--out", partial], { cwd: REPO_ROOT, stdio: ["ignore", "inherit", "inherit"] });
    renameSync(partial, file);
  }
}
