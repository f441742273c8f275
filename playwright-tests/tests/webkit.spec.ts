// Safari's engine: the chat app loads and runs in WebKitGTK's MiniBrowser (JavaScriptCore, WebKit's
// DOM and IndexedDB), driven through plain WebDriver. WebKit lacks WebGPU here both ways it can:
// `navigator.gpu` undefined (the default) and null (the WebGPU feature flag on, with no GPU
// process support for it in this build); either way the engine runs on the CPU backend
// (WebAssembly SIMD in JavaScriptCore), and the default model's greedy reply equals the native
// CLI's on its CPU backend. This WebKitGTK has no SharedArrayBuffer even cross-origin isolated, so
// the engine runs on one thread, and the app says so.

import { ORIGIN } from "../browser";
import { TINY_UNTIED_MODEL, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { nativeGenerate } from "./native";
import { startXvfb, WebKitDriver, type WebDriverSession } from "./webdriver";

interface PageState {
  gpu: string;
  userAgent: string;
  title: string | null;
  text: string | null;
  /** The composer is enabled: the model loaded. */
  ready: boolean;
  engine: string | null;
  /** The CPU threads the page should run the engine on. */
  threads: number;
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
    ready: document.getElementById("input")?.disabled === false,
    engine: document.getElementById("engine-info")?.textContent ?? null,
    // The CPU threads the engine should run on: every core (up to 8) where the page can share wasm
    // memory (cross-origin isolated, with SharedArrayBuffer: WebKitGTK here leaves it out).
    threads: crossOriginIsolated && typeof SharedArrayBuffer === "function" ? Math.min(navigator.hardwareConcurrency, 8) : 1,
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

  /** Opens the app on `model` (the default model when absent) and waits for it to load. */
  async function openApp(session: WebDriverSession, model?: string): Promise<PageState> {
    await session.setWindowSize(375, 812);
    await session.navigate(model ? `${ORIGIN}/?model=${encodeURIComponent(model)}` : `${ORIGIN}/`);
    // The HTML's composer starts disabled: only the app's code, with the model loaded, enables it.
    const deadline = Date.now() + 120_000;
    let state = await session.execute<PageState>(READ_STATE);
    while (!state.ready && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 500));
      state = await session.execute<PageState>(READ_STATE);
    }
    expect(state.ready, `the app did not load; the page said ${JSON.stringify(state)}`).toBe(true);
    return state;
  }

  function expectSafari(state: PageState, gpu: string): void {
    expect(state.userAgent).toMatch(/AppleWebKit\/.* Safari\//);
    expect(state.userAgent).not.toMatch(/Chrome|Chromium/);
    expect(state.gpu).toBe(gpu);
    expect(state.engine).toContain(`CPU (WebAssembly, ${state.threads} thread${state.threads === 1 ? "" : "s"})`);
    expect(state.toast, "an uncaught error in the app").toBeNull();
    expect(state.overflow, "horizontal overflow at 375 px").toBeLessThanOrEqual(0);
  }

  test("the default model loads in JavaScriptCore on the CPU and streams the native CLI's greedy reply", async ({}, testInfo) => {
    test.setTimeout(300_000);
    if (!driver) throw new Error("WebKitWebDriver did not start");
    const session = await driver.session([]);
    try {
      const state = await openApp(session);
      expectSafari(state, "undefined");
      const system = "You are a helpful assistant. Answer clearly and briefly.";
      const user = "What is the boiling point of water at sea level?";
      const native = nativeGenerate(user, { chat: true, system, maxTokens: 16, backend: "cpu" });
      // The app's engine, streamed: the pieces arrive one by one and add up to the reply.
      await session.execute(
        `const [messages] = arguments;
         window.__reply = null;
         (async () => {
           const stream = await window.radixlmChat.engine.chat.completions.create({ messages, max_tokens: 16, temperature: 0, stream: true });
           let text = "", pieces = 0;
           for await (const chunk of stream) { const d = chunk.choices[0]?.delta?.content ?? ""; if (d) { text += d; pieces++; } }
           window.__reply = { text, pieces };
         })().catch((e) => { window.__reply = { error: String(e) }; });`,
        [{ role: "system", content: system }, { role: "user", content: user }],
      );
      await expect.poll(async () => session.execute<unknown>("return window.__reply;"), { timeout: 120_000 }).not.toBeNull();
      const reply = await session.execute<{ text?: string; pieces?: number; error?: string }>("return window.__reply;");
      await testInfo.attach("webkit-default-model", { body: await session.screenshot(), contentType: "image/png" });
      expect(reply.error).toBeUndefined();
      expect(reply.pieces).toBeGreaterThan(1);
      expect(reply.text).toBe(native.text);
    } finally {
      await session.close();
    }
  });

  const cases: Array<[string, string[], string]> = [
    ["navigator.gpu undefined", [], "undefined"],
    ["navigator.gpu null, with --features=+WebGPU", ["--features=+WebGPU"], "null"],
  ];
  for (const [name, args, gpu] of cases) {
    test(`the app runs in JavaScriptCore on the CPU backend (${name})`, async ({}, testInfo) => {
      if (!driver) throw new Error("WebKitWebDriver did not start");
      const session = await driver.session(args);
      try {
        await openApp(session, testModelUrl(TINY_UNTIED_MODEL));
        // Give anything still pending (the conversation store opening, the service worker) time to fail.
        await new Promise((r) => setTimeout(r, 1000));
        const state = await session.execute<PageState>(READ_STATE);
        await testInfo.attach(`webkit-${gpu}`, { body: await session.screenshot(), contentType: "image/png" });
        expectSafari(state, gpu);
      } finally {
        await session.close();
      }
    });
  }
});
