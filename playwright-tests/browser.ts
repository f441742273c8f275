// The browser every test and benchmark runs in: Debian's Chromium, headless, with WebGPU on a
// software adapter (SwiftShader) where there is no GPU, and the server it loads pages from.
// Shared by the configs and by tests that launch a browser of their own with one flag changed.

import { SERVE_LOG } from "./paths";

/** Chromium to drive (RADIXLM_CHROMIUM overrides; Playwright's own downloads are not used). */
export const CHROMIUM_PATH = process.env.RADIXLM_CHROMIUM ?? "/usr/bin/chromium";

/** Without this flag Chromium on Linux offers `navigator.gpu` but no adapter. */
export const WEBGPU_FLAG = "--enable-unsafe-webgpu";

/** Flags for a quiet, reproducible headless Chromium (Playwright adds its own --headless too). */
export const BASE_FLAGS = [
  "--headless=new",
  "--no-sandbox",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

export const WEBGPU_ARGS = [WEBGPU_FLAG, ...BASE_FLAGS];

/** The fixed port of scripts/serve.mjs: the Cache API is per origin, port included. */
export const PORT = Number(process.env.RADIXLM_PORT ?? 8731);
export const ORIGIN = `http://127.0.0.1:${PORT}`;

/** scripts/serve.mjs on the fixed port, as Playwright's web server. */
export const SERVER = {
  command: `node ../scripts/serve.mjs --port ${PORT}`,
  url: `${ORIGIN}/harness/`,
  wait: { stdout: /radixlm: serving http:\/\// },
  // Always our own server: the reload test reads the request log this one writes.
  reuseExistingServer: false,
  env: { RADIXLM_SERVE_LOG: SERVE_LOG },
  stdout: "ignore" as const,
  stderr: "pipe" as const,
  timeout: 30_000,
};
