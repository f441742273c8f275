import { defineConfig } from "@playwright/test";
import { CHROMIUM_PATH, ORIGIN, SERVER, WEBGPU_ARGS } from "./browser";

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
  webServer: SERVER,
});
