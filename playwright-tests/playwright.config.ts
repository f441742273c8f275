import { defineConfig } from "@playwright/test";
import { CHROMIUM_PATH, ORIGIN, PORT, WEBGPU_ARGS } from "./browser";
import { SERVE_LOG } from "./paths";

// The model runs on a CPU-emulated GPU (SwiftShader) on a small machine: one test at a time,
// and timeouts sized for seconds per prompt rather than milliseconds.
export default defineConfig({
  testDir: "./tests",
  globalSetup: "./global-setup.ts",
  fullyParallel: false,
  workers: 1,
  retries: 0,
  forbidOnly: !!process.env.CI,
  timeout: 180_000,
  expect: { timeout: 30_000 },
  reporter: [["list"], ["html", { open: "never", outputFolder: "report" }]],
  outputDir: "test-results",
  use: {
    baseURL: ORIGIN,
    trace: "retain-on-failure",
    screenshot: "only-on-failure",
  },
  projects: [
    {
      name: "engine",
      use: {
        browserName: "chromium",
        headless: true,
        launchOptions: { executablePath: CHROMIUM_PATH, args: WEBGPU_ARGS },
      },
    },
  ],
  webServer: {
    command: `node ../scripts/serve.mjs --port ${PORT}`,
    url: `${ORIGIN}/harness/`,
    wait: { stdout: /radixlm: serving http:\/\// },
    // Always our own server: the reload test reads the request log this one writes.
    reuseExistingServer: false,
    env: { RADIXLM_SERVE_LOG: SERVE_LOG },
    stdout: "ignore",
    stderr: "pipe",
    timeout: 30_000,
  },
});
