// Time from opening the chat page to the first streamed token, for a person coming back: the
// app, the model and the spilled system prompt are already on the device (service worker, Cache
// API, IndexedDB). Each opening is a new tab on the same browser profile, asking a new question in
// a new chat, so what it can reuse is the system prompt alone.
//
//   cd playwright-tests && npx playwright test -c bench.config.ts page-ttft
//
// Prints a table and writes results/page-ttft.json.

import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import { DEFAULT_MODEL_URL } from "../paths";
import { describe, runEnvironment } from "./engines";
import { median, resultsDir } from "./protocol";

/** New questions of similar length: each opening asks one no earlier opening asked. */
const QUESTIONS = [
  "Give me three tips for a good night's sleep.",
  "Give me three tips for learning a new language.",
  "Give me three tips for a long train journey.",
  "Give me three tips for keeping a plant alive.",
  "Give me three tips for a first job interview.",
];

interface Opening {
  /** From navigation start (performance.timeOrigin) to the model being ready (the input enabled). */
  readyMs: number;
  /** From navigation start to the first streamed text of the reply. */
  firstTokenMs: number;
  stats: string;
}

/**
 * Runs in the page before its scripts: the moment the input is enabled, starts a new chat and
 * sends `question` (no test-runner round trip in the figure), and records when the reply's first
 * text appears, both against the page's own clock.
 */
function sendOnReady(question: string): void {
  const marks: { ready?: number; firstToken?: number } = {};
  (window as unknown as { benchMarks: typeof marks }).benchMarks = marks;
  const observer = new MutationObserver(() => {
    const input = document.getElementById("input") as HTMLTextAreaElement | null;
    if (marks.ready === undefined && input && !input.disabled) {
      marks.ready = performance.now();
      document.getElementById("new-chat")?.click();
      input.value = question;
      (document.getElementById("composer") as HTMLFormElement).requestSubmit();
    }
    // Before the new chat, the page shows the last conversation, replies and all.
    if (marks.ready !== undefined && marks.firstToken === undefined && document.querySelector(".message.assistant .content")?.textContent) {
      marks.firstToken = performance.now();
    }
  });
  observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
}

test("page-ttft: opening the page to the first streamed token, model cached", async ({ context }) => {
  await test.step("first visit: download the model, keep the app and the system prompt", async () => {
    const page = await context.newPage();
    await page.goto("/");
    await page.evaluate(() => {
      localStorage.setItem("radixlm.temperature", "0");
      localStorage.setItem("radixlm.maxTokens", "8");
    });
    const input = page.getByRole("textbox", { name: "Message" });
    await expect(input).toBeEnabled({ timeout: 300_000 });
    await page.evaluate(async () => void (await navigator.serviceWorker.ready));
    await expect
      .poll(() => page.evaluate(async (url) => (await caches.match(new URL(url, location.href).href)) !== undefined, DEFAULT_MODEL_URL), { timeout: 120_000 })
      .toBe(true);
    await input.fill("Hello!");
    await input.press("Enter");
    await expect(page.getByRole("button", { name: "Stop" })).toBeHidden({ timeout: 300_000 });
    // The write-behind runs once the reply is out; it is done when the device holds pages.
    await expect.poll(async () => (await page.locator("#cache-stats").textContent()) ?? "", { timeout: 60_000 }).toMatch(/Saved on this device[1-9]\d* pages/);
    await page.close();
  });

  const openings: Opening[] = [];
  for (const question of QUESTIONS) {
    const page = await context.newPage();
    await page.addInitScript(sendOnReady, question);
    await page.goto("/");
    // The reply's figures fill the panel once it is over (before that it shows "—").
    await expect(page.locator("#reply-stats dt").first()).toHaveText("Reused from the GPU", { timeout: 300_000 });
    const marks = await page.evaluate(() => (window as unknown as { benchMarks: { ready?: number; firstToken?: number } }).benchMarks);
    if (marks.ready === undefined || marks.firstToken === undefined) throw new Error(`opening for "${question}" recorded no marks`);
    const stats = ((await page.locator("#reply-stats").innerText()) ?? "").replace(/\s*\n\s*/g, " ");
    openings.push({ readyMs: marks.ready, firstTokenMs: marks.firstToken, stats });
    await page.close();
  }

  const env = await runEnvironment(context);
  const result = {
    benchmark: "page-ttft",
    ...env,
    openings,
    medianReadyMs: median(openings.map((o) => o.readyMs)),
    medianFirstTokenMs: median(openings.map((o) => o.firstTokenMs)),
  };
  console.log(`\n${describe(env)}`);
  console.log("opening  ready (ms)  first token (ms)  last reply");
  openings.forEach((o, i) => console.log(`${String(i + 1).padStart(7)}  ${o.readyMs.toFixed(0).padStart(10)}  ${o.firstTokenMs.toFixed(0).padStart(16)}  ${o.stats}`));
  console.log(`median   ${result.medianReadyMs.toFixed(0).padStart(10)}  ${result.medianFirstTokenMs.toFixed(0).padStart(16)}`);
  writeFileSync(path.join(resultsDir(), "page-ttft.json"), JSON.stringify(result, null, 2) + "\n");
});
