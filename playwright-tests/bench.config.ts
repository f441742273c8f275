import { defineConfig } from "@playwright/test";
import { CHROMIUM_PATH, ORIGIN, SERVER, WEBGPU_ARGS } from "./browser";

// Browser benchmarks: figures printed (and written to results/), not pass/fail timings. Same
// browser, flags and server as the tests; one benchmark at a time on an otherwise idle machine.
export default defineConfig({
  testDir: "./bench",
  testMatch: "*.bench.ts",
  globalSetup: "./global-setup.ts",
  fullyParallel: false,
  workers: 1,
  retries: 0,
  // The full prefix run takes over an hour on a software GPU.
  timeout: 4 * 3_600_000,
  expect: { timeout: 60_000 },
  reporter: [["list"]],
  outputDir: "test-results/bench",
  use: {
    baseURL: ORIGIN,
    browserName: "chromium",
    headless: true,
    launchOptions: { executablePath: CHROMIUM_PATH, args: WEBGPU_ARGS },
  },
  webServer: SERVER,
});
