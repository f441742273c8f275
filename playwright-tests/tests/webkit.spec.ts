// Safari's engine: the chat app loads and runs in WebKitGTK's MiniBrowser (JavaScriptCore, WebKit's
// DOM and IndexedDB), driven through plain WebDriver, and shows the no-WebGPU screen both ways
// WebKit lacks WebGPU here: `navigator.gpu` undefined (the default) and null (the WebGPU feature
// flag on, with no GPU process support for it in this build).

import { ORIGIN } from "../browser";
import { expect, test } from "./fixtures";
import { startXvfb, WebKitDriver } from "./webdriver";

interface PageState {
  gpu: string;
  userAgent: string;
  title: string | null;
  text: string | null;
  /** What the app's error reporter showed: it puts every uncaught error on screen. */
  toast: string | null;
  overflow: number;
}

const READ_STATE = `
  const toast = document.getElementById("toast");
  return {
    gpu: navigator.gpu === null ? "null" : typeof navigator.gpu,
    userAgent: navigator.userAgent,
    title: document.getElementById("screen-title")?.textContent ?? null,
    text: document.getElementById("screen-text")?.textContent ?? null,
    toast: toast && !toast.hidden ? toast.textContent : null,
    overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  };`;

test.describe("WebKit (MiniBrowser through WebDriver)", () => {
  let xvfb: Awaited<ReturnType<typeof startXvfb>> | undefined;
  let driver: WebKitDriver | undefined;

  test.beforeAll(async () => {
    xvfb = await startXvfb();
    driver = await WebKitDriver.start(xvfb.display);
  });

  test.afterAll(() => {
    driver?.stop();
    xvfb?.stop();
  });

  const cases: Array<[string, string[], string]> = [
    ["navigator.gpu undefined", [], "undefined"],
    ["navigator.gpu null, with --features=+WebGPU", ["--features=+WebGPU"], "null"],
  ];
  for (const [name, args, gpu] of cases) {
    test(`the app runs in JavaScriptCore and shows the no-WebGPU screen (${name})`, async ({}, testInfo) => {
      if (!driver) throw new Error("WebKitWebDriver did not start");
      const session = await driver.session(args);
      try {
        await session.setWindowSize(375, 812);
        await session.navigate(`${ORIGIN}/`);
        // The HTML says "Loading the model": only the app's code, run to its end, changes it.
        await expect.poll(async () => (await session.execute<PageState>(READ_STATE)).title, { timeout: 30_000 }).toBe("This browser has no WebGPU");
        // Give anything still pending (the conversation store opening, the service worker) time to fail.
        await new Promise((r) => setTimeout(r, 1000));
        const state = await session.execute<PageState>(READ_STATE);
        await testInfo.attach(`webkit-${gpu}`, { body: await session.screenshot(), contentType: "image/png" });
        expect(state.userAgent).toMatch(/AppleWebKit\/.* Safari\//);
        expect(state.userAgent).not.toMatch(/Chrome|Chromium/);
        expect(state.gpu).toBe(gpu);
        expect(state.text).toMatch(/Safari 26\+/);
        expect(state.toast, "an uncaught error in the app").toBeNull();
        expect(state.overflow, "horizontal overflow at 375 px").toBeLessThanOrEqual(0);
      } finally {
        await session.close();
      }
    });
  }
});
