// Files on disk the tests and the global setup share. Paths are relative to the repository root.

import path from "node:path";

export const REPO_ROOT = path.resolve(import.meta.dirname, "..");

/** The native CLI: the reference the browser's output is compared against, and the model synthesiser. */
export const CLI = process.env.RADIXLM_CLI ?? path.join(REPO_ROOT, "target", "debug", "radixlm");

/** The default model (scripts/fetch_model.sh puts it there). */
export const DEFAULT_MODEL_FILE = path.join(REPO_ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf");
export const DEFAULT_MODEL_URL = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

/** Models written at test time, served under /test-models/. */
export const TEST_MODELS_DIR = path.join(REPO_ROOT, "target", "test-models");
export const testModelFile = (name: string): string => path.join(TEST_MODELS_DIR, name);
export const testModelUrl = (name: string): string => `/test-models/${name}`;

/** A tiny synthetic model (byte-level tokenizer, ChatML template): fast tests. */
export const TINY_MODEL = "tiny.gguf";
/** A synthetic model with SmolLM2-135M's shapes (untied LM head, random weights): the equality test. */
export const SMOLLM2_SHAPE_MODEL = "smollm2-135m-shape.untied.gguf";
/** A tiny synthetic model with an untied LM head, whose greedy replies vary with the context. */
export const TINY_UNTIED_MODEL = "tiny.untied.gguf";
/** The same in Q4_0: the matmul's block-pair path, which Q8_0 shares. */
export const TINY_Q4_0_MODEL = "tiny.untied.q4_0.gguf";
/** A synthetic model with Llama-3.2-1B's shapes in Q4_0: the memory test. */
export const LLAMA_1B_SHAPE_MODEL = "llama-3.2-1b-shape.q4_0.gguf";

/** The dev server's request log (RADIXLM_SERVE_LOG), read by the reload test. */
export const SERVE_LOG = path.join(REPO_ROOT, "target", "playwright-serve.log");

/** What the package's build leaves behind; the tests import it from the served page. */
export const PKG_ENTRY = path.join(REPO_ROOT, "pkg", "dist", "index.js");
export const PKG_WASM = path.join(REPO_ROOT, "pkg", "dist", "wasm", "radixlm_bg.wasm");
export const PKG_WASM_THREADS = path.join(REPO_ROOT, "pkg", "dist", "wasm-threads", "radixlm_bg.wasm");
