// Fixtures every test uses:
//   - `consoleErrors` (automatic): collects console errors and uncaught exceptions from the test's
//     pages and their workers, and fails the test at teardown if there were any. The engine
//     reports uncaptured WebGPU (validation) errors with console.error, so this is where a bad
//     dispatch shows up even when the output looks right.
//   - `page`: Playwright's page, watched by `consoleErrors`, with the harness globals installed.
//   - `harness`: that page, opened on the blank harness page.

import { test as base, expect, type ConsoleMessage, type Page, type TestInfo, type Worker } from "@playwright/test";
import { openHarness, preparePage } from "./harness";

export interface ConsoleErrors {
  /** Watches another page (one from a browser the test launched itself). */
  watch(page: Page): void;
  /** What was seen so far, one line each. */
  readonly seen: readonly string[];
}

class ConsoleErrorWatch implements ConsoleErrors {
  readonly seen: string[] = [];
  // Chromium reports a dedicated worker's console messages both on the page's "console" event
  // and on the worker's, as the same ConsoleMessage object: remembering the objects counts each once.
  private readonly counted = new WeakSet<ConsoleMessage>();

  watch(page: Page): void {
    page.on("console", (m) => this.onConsole(m, null));
    page.on("worker", (w) => w.on("console", (m) => this.onConsole(m, w)));
    // Uncaught exceptions and unhandled rejections, in the page or one of its workers.
    page.on("pageerror", (e) => this.seen.push(`uncaught exception: ${e.name}: ${e.message}${e.stack ? `\n${e.stack}` : ""}`));
    page.on("crash", () => this.seen.push("the page crashed"));
  }

  private onConsole(m: ConsoleMessage, worker: Worker | null): void {
    if (m.type() !== "error" || this.counted.has(m)) return;
    this.counted.add(m);
    const loc = m.location();
    const where = loc.url ? ` (${loc.url}:${loc.lineNumber + 1}:${loc.columnNumber + 1})` : "";
    const from = worker ?? m.worker();
    this.seen.push(`console.error${from ? ` in worker ${from.url()}` : ""}: ${m.text()}${where}`);
  }

  async check(testInfo: TestInfo): Promise<void> {
    if (this.seen.length === 0) return;
    const report = this.seen.join("\n");
    await testInfo.attach("console errors", { body: report, contentType: "text/plain" });
    throw new Error(`the page logged ${this.seen.length} error(s):\n${report}`);
  }
}

export const test = base.extend<{ consoleErrors: ConsoleErrors; harness: Page }>({
  consoleErrors: [
    async ({}, use, testInfo) => {
      const watch = new ConsoleErrorWatch();
      await use(watch);
      await watch.check(testInfo);
    },
    { auto: true },
  ],
  page: async ({ page, consoleErrors }, use) => {
    consoleErrors.watch(page);
    await preparePage(page);
    await use(page);
  },
  harness: async ({ page }, use) => {
    await openHarness(page);
    await use(page);
  },
});

export { expect };
