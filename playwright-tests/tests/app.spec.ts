// The chat page (web/) as a person uses it, on the tiny synthetic model (?model=) so replies come
// in seconds. Screenshots of each state are attached to the test results.

import { statSync } from "node:fs";
import { chromium, type Page, type TestInfo } from "@playwright/test";
import { BASE_FLAGS, CHROMIUM_PATH, ORIGIN } from "../browser";
import { TINY_MODEL, TINY_UNTIED_MODEL, testModelFile, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import type { Engine } from "./radixlm";

declare global {
  interface Window {
    /** The app's handle on its engine (web/src/main.ts). */
    radixlmChat?: { engine: Engine };
  }
}

const APP = `/?model=${encodeURIComponent(testModelUrl(TINY_UNTIED_MODEL))}`;

async function openApp(page: Page): Promise<void> {
  await page.goto(APP);
  await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
}

async function shot(page: Page, testInfo: TestInfo, name: string): Promise<void> {
  await testInfo.attach(name, { body: await page.screenshot({ fullPage: true }), contentType: "image/png" });
}

/** Sends a message with Enter and waits for the reply to finish. */
async function send(page: Page, text: string): Promise<void> {
  const input = page.getByRole("textbox", { name: "Message" });
  await input.fill(text);
  await input.press("Enter");
  await expect(page.getByRole("button", { name: "Stop" })).toBeHidden({ timeout: 120_000 });
}

const replies = (page: Page) => page.getByRole("article", { name: "Assistant" });
const mine = (page: Page) => page.getByRole("article", { name: "You" });

async function setMaxTokens(page: Page, n: number): Promise<void> {
  await page.evaluate((v) => localStorage.setItem("radixlm.maxTokens", String(v)), n);
}

test("a message is sent with Enter, the reply streams in, and the cache panel reports it", async ({ page }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 24);
  await openApp(page);
  await shot(page, testInfo, "empty");
  await send(page, "Tell me about the lighthouse.");
  await expect(mine(page)).toHaveText(/Tell me about the lighthouse\./);
  await expect(replies(page)).toHaveCount(1);
  await expect(replies(page).first()).toContainText(/of \d+ prompt tokens from the cache/);
  const panel = page.getByRole("complementary", { name: "Settings and cache" });
  await expect(panel.getByText("Computed")).toBeAttached();
  await expect(page.getByRole("heading", { level: 1 })).toHaveText("Tell me about the lighthouse.");
  await shot(page, testInfo, "replied");
});

test("Stop ends a reply early and the page answers again", async ({ page }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 400);
  // Greedy: a sampled reply of the tiny model may end after a few tokens, before Stop is
  // pressed; its greedy reply runs 119 tokens.
  await page.evaluate(() => localStorage.setItem("radixlm.temperature", "0"));
  // On WebGPU (SwiftShader here) the reply is still streaming when Stop is pressed; the CPU
  // backend would have finished the tiny model's reply first.
  await page.goto(`${APP}&backend=webgpu`);
  await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
  const input = page.getByRole("textbox", { name: "Message" });
  await input.fill("Write a very long story.");
  await input.press("Enter");
  const stop = page.getByRole("button", { name: "Stop" });
  await expect(stop).toBeVisible();
  await expect(replies(page).first().locator(".content")).not.toBeEmpty({ timeout: 60_000 });
  await stop.click();
  await expect(stop).toBeHidden({ timeout: 30_000 });
  await expect(replies(page).first()).toContainText("stopped");
  await shot(page, testInfo, "stopped");
  await setMaxTokens(page, 8);
  await page.reload();
  await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
  await send(page, "And now a short one.");
  await expect(replies(page)).toHaveCount(2);
});

test("new chat, reload, and the conversations are still there", async ({ page }) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  await openApp(page);
  await send(page, "First conversation");
  await page.getByRole("button", { name: "New chat" }).click();
  await expect(page.getByRole("article")).toHaveCount(0);
  await send(page, "Second conversation");
  const list = page.getByRole("complementary", { name: "Conversations" });
  await expect(list.getByRole("button", { name: "First conversation", exact: true })).toBeAttached();
  await page.reload();
  await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
  await expect(list.getByRole("button", { name: "Second conversation", exact: true })).toBeAttached();
  await list.getByRole("button", { name: "First conversation", exact: true }).click({ force: true });
  await expect(mine(page)).toHaveText(/First conversation/);
});

test("a conversation is renamed in place and deleted after a confirmation", async ({ page }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  await openApp(page);
  await send(page, "Keep this one");
  await page.getByRole("button", { name: "New chat" }).click();
  await send(page, "Throw this one away");
  await page.getByRole("button", { name: "New chat" }).click();
  const list = page.getByRole("complementary", { name: "Conversations" });
  await list.getByRole("button", { name: "Rename Keep this one" }).click();
  const name = list.getByRole("textbox", { name: "Conversation name" });
  await name.fill("Lighthouse notes");
  await name.press("Enter");
  await expect(list.getByRole("button", { name: "Lighthouse notes", exact: true })).toBeVisible();
  // Esc keeps the old name.
  await list.getByRole("button", { name: "Rename Lighthouse notes" }).click();
  await name.fill("Not this");
  await name.press("Escape");
  await expect(list.getByRole("button", { name: "Lighthouse notes", exact: true })).toBeVisible();

  const dialog = page.getByRole("dialog", { name: "Delete this conversation?" });
  await list.getByRole("button", { name: "Delete Throw this one away" }).click();
  await expect(dialog).toBeVisible();
  await shot(page, testInfo, "delete-dialog");
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await expect(list.getByRole("button", { name: "Throw this one away", exact: true })).toBeVisible();
  await list.getByRole("button", { name: "Delete Throw this one away" }).click();
  await dialog.getByRole("button", { name: "Delete" }).click();
  await expect(list.getByRole("button", { name: "Throw this one away", exact: true })).toHaveCount(0);

  await page.reload();
  await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
  await expect(list.getByRole("button", { name: "Lighthouse notes", exact: true })).toBeAttached();
  await expect(list.getByRole("button", { name: "Throw this one away", exact: true })).toHaveCount(0);
});

test("once opened, the page and the model work offline", async ({ page, context }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  await openApp(page);
  // The service worker keeps the app's files; the package keeps the model in the Cache API.
  await page.evaluate(async () => void (await navigator.serviceWorker.ready));
  await expect
    .poll(() => page.evaluate(async (url) => (await caches.match(new URL(url, location.href).href)) !== undefined, testModelUrl(TINY_UNTIED_MODEL)))
    .toBe(true);
  await context.setOffline(true);
  try {
    await page.reload();
    await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
    await send(page, "Are you there without a network?");
    await expect(replies(page)).toHaveCount(1);
    await expect(replies(page).first().locator(".content")).not.toBeEmpty();
    await shot(page, testInfo, "offline");
  } finally {
    await context.setOffline(false);
  }
});

test("a GPU reset shows its screen while the model reloads, and the chat goes on", async ({ page }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  // On SwiftShader the app would take the CPU; the GPU is asked for by name.
  await page.goto(`${APP}&backend=webgpu`);
  await expect(page.getByRole("textbox", { name: "Message" })).toBeEnabled({ timeout: 60_000 });
  await send(page, "Before the reset");
  const screen = page.getByRole("dialog", { name: "The GPU was reset — reloading the model" });
  await page.evaluate(async () => {
    const engine = window.radixlmChat?.engine;
    if (!engine) throw new Error("the app exposes no engine");
    await engine.debug.destroyDevice();
  });
  await expect(screen).toBeVisible({ timeout: 30_000 });
  await shot(page, testInfo, "gpu-reset");
  await expect(screen).toBeHidden({ timeout: 60_000 });
  await expect(page.getByText("The model is back on the GPU.")).toBeVisible();
  await send(page, "After the reset");
  await expect(replies(page)).toHaveCount(2);
  await expect(replies(page).nth(1).locator(".content")).not.toBeEmpty();
  expect(await page.evaluate(() => window.radixlmChat?.engine.debug.reloads())).toBe(1);
});

/** A reply's "N of M prompt tokens from the cache" line. */
async function promptTokens(reply: ReturnType<Page["locator"]>): Promise<{ fromCache: number; total: number }> {
  const text = (await reply.locator(".tools").textContent()) ?? "";
  const m = /(\d+) of (\d+) prompt tokens from the cache/.exec(text);
  if (!m) throw new Error(`no prompt token line in "${text}"`);
  return { fromCache: Number(m[1]), total: Number(m[2]) };
}

test("editing an earlier message starts a branch that reuses the shared prefix, and the old branch stays", async ({ page }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  await openApp(page);
  await send(page, "What is the tower made of?");
  await send(page, "And how tall is it?");
  const panel = page.getByRole("complementary", { name: "Settings and cache" });
  const pageSize = Number(/\((\d+) tokens each\)/.exec((await panel.textContent()) ?? "")?.[1]);
  expect(pageSize).toBeGreaterThan(0);
  const firstPrompt = (await promptTokens(replies(page).first())).total;
  const whole = (n: number) => n - (n % pageSize);

  // Editing the second message shares the first exchange: its prompt, at least, comes from the cache.
  await mine(page).nth(1).getByRole("button", { name: "Edit and resend" }).click();
  const edited = page.getByRole("textbox", { name: "Edited message" });
  await edited.fill("And how heavy is it?");
  await edited.press("Enter");
  await expect(page.getByRole("button", { name: "Stop" })).toBeHidden({ timeout: 120_000 });
  await expect(mine(page).nth(1)).toContainText("2 / 2");
  const second = await promptTokens(replies(page).nth(1));
  expect(second.fromCache, `the first request's ${firstPrompt} prompt tokens, in whole pages of ${pageSize}`).toBeGreaterThanOrEqual(whole(firstPrompt));

  // Editing the first message shares the system prompt only.
  await mine(page).first().getByRole("button", { name: "Edit and resend" }).click();
  await edited.fill("What is the lamp made of?");
  await edited.press("Enter");
  await expect(page.getByRole("button", { name: "Stop" })).toBeHidden({ timeout: 120_000 });
  await expect(mine(page)).toHaveCount(1);
  await expect(mine(page).first()).toContainText("2 / 2");
  const system = await promptTokens(replies(page).first());
  expect(system.fromCache, "the system prompt's whole pages").toBeGreaterThanOrEqual(pageSize);
  expect(system.fromCache).toBeLessThan(firstPrompt);
  await shot(page, testInfo, "branched");

  // The old branch, with its own edited version, is still there.
  await mine(page).first().getByRole("button", { name: "Previous version" }).click();
  await expect(mine(page)).toHaveCount(2);
  await expect(mine(page).first()).toContainText("What is the tower made of?");
  await expect(mine(page).first()).toContainText("1 / 2");
  await expect(mine(page).nth(1)).toContainText("And how heavy is it?");
});

test("pinning the system prompt shows in the cache panel", async ({ page }) => {
  await openApp(page);
  const panel = page.getByRole("complementary", { name: "Settings and cache" });
  await panel.getByRole("checkbox", { name: "Pin in the cache" }).check();
  await expect(panel.getByText("the system prompt")).toBeVisible();
  const pinned = panel.locator("dt", { hasText: "Pinned pages" }).locator("xpath=following-sibling::dd[1]");
  await expect.poll(async () => Number(await pinned.textContent())).toBeGreaterThan(0);
});

test("on a 375 × 812 phone screen nothing scrolls sideways", async ({ page }, testInfo) => {
  await page.setViewportSize({ width: 375, height: 812 });
  await page.goto("/");
  await setMaxTokens(page, 24);
  await openApp(page);
  await send(page, "A long word: " + "x".repeat(120) + "\n```\n" + "const line = 'a code line much longer than a phone screen is wide';\n".repeat(3) + "```");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  expect(overflow, "horizontal overflow in px").toBeLessThanOrEqual(0);
  for (const name of ["Send", "Conversations", "Settings and cache"]) {
    const box = await page.getByRole("button", { name, exact: true }).boundingBox();
    expect(box?.height ?? 0, `${name} is a 44 px touch target`).toBeGreaterThanOrEqual(44);
  }
  await shot(page, testInfo, "phone");
  await page.getByRole("button", { name: "Conversations" }).click();
  await expect(page.getByRole("button", { name: "New chat" })).toBeVisible();
  await shot(page, testInfo, "phone-conversations");
});

test("a browser without WebGPU answers on the CPU; asked for WebGPU it says which browsers have it", async ({ consoleErrors }, testInfo) => {
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: BASE_FLAGS });
  try {
    const page = await browser.newPage({ baseURL: ORIGIN });
    consoleErrors.watch(page);
    await page.goto("/");
    await setMaxTokens(page, 8);
    await openApp(page);
    // Served cross-origin isolated: a thread per core, up to 8.
    const threads = await page.evaluate(() => Math.min(navigator.hardwareConcurrency, 8));
    await expect(page.locator("#engine-info")).toContainText(`CPU (WebAssembly, ${threads} thread${threads === 1 ? "" : "s"})`);
    await send(page, "Hello without a GPU");
    await expect(replies(page).first().locator(".content")).not.toBeEmpty();
    await shot(page, testInfo, "no-webgpu-cpu");

    await page.goto(`${APP}&backend=webgpu`);
    await expect(page.getByRole("heading", { name: "This browser has no WebGPU" })).toBeVisible({ timeout: 30_000 });
    await expect(page.getByRole("dialog")).toContainText(/Chrome or Edge 113/);
    await shot(page, testInfo, "no-webgpu");
  } finally {
    await browser.close();
  }
});

test("on a software GPU the app runs on the CPU and says so in its panel", async ({ page }) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  await openApp(page);
  await expect(page.locator("#engine-info")).toContainText("CPU (WebAssembly");
  expect(await page.evaluate(() => window.radixlmChat?.engine.info.backend)).toBe("cpu");
});

/** A row of the panel's Engine list. */
const engineRow = (page: Page, name: string) =>
  page.locator("#engine-info dt", { hasText: new RegExp(`^${name}$`) }).locator("xpath=following-sibling::dd[1]");

/** A size as the panel shows it (web/src/loading.ts bytes(), below a gigabyte). */
const shownSize = (n: number): string => (n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MB` : `${Math.ceil(n / 1024)} KB`);

test("a model chosen by URL in the panel loads, keeps the conversation, and is remembered after a reload", async ({ page }, testInfo) => {
  await page.goto("/");
  await setMaxTokens(page, 8);
  await page.goto(`/?model=${encodeURIComponent(testModelUrl(TINY_MODEL))}`);
  const input = page.getByRole("textbox", { name: "Message" });
  await expect(input).toBeEnabled({ timeout: 60_000 });
  await send(page, "Before the switch");
  const before = await page.evaluate(() => window.radixlmChat?.engine.info.fingerprint);

  const url = testModelUrl(TINY_UNTIED_MODEL);
  const size = shownSize(statSync(testModelFile(TINY_UNTIED_MODEL)).size);
  const panel = page.getByRole("complementary", { name: "Settings and cache" });
  const menu = panel.getByRole("combobox", { name: "Model", exact: true });
  const field = panel.getByRole("textbox", { name: "Model URL" });
  await menu.selectOption({ label: "A GGUF file from a URL" });
  await field.fill(url);
  await panel.getByRole("button", { name: "Load model" }).click();
  await expect(page.getByRole("dialog", { name: "Loading the model" })).toBeHidden({ timeout: 60_000 });
  await expect(input).toBeEnabled();
  const info = await page.evaluate(() => window.radixlmChat?.engine.info);
  expect(info?.fingerprint).toBeDefined();
  expect(info?.fingerprint).not.toBe(before);
  await expect(engineRow(page, "Model")).toHaveText(info?.modelName ?? "");
  await expect(engineRow(page, "Size")).toHaveText(size);
  await expect(engineRow(page, "Replies")).toHaveText("Chat, with the model's template");
  await expect(mine(page)).toHaveText(/Before the switch/);
  await send(page, "After the switch");
  await expect(replies(page)).toHaveCount(2);
  await expect(replies(page).nth(1).locator(".content")).not.toBeEmpty();
  await shot(page, testInfo, "model-by-url");

  // The menu took ?model= out of the address: the reload loads the model chosen in the menu.
  await page.reload();
  await expect(input).toBeEnabled({ timeout: 60_000 });
  expect(new URL(page.url()).searchParams.has("model")).toBe(false);
  await expect(menu).toHaveValue("url");
  await expect(field).toHaveValue(url);
  await expect(engineRow(page, "Size")).toHaveText(size);
  expect(await page.evaluate(() => window.radixlmChat?.engine.info.fingerprint)).toBe(info?.fingerprint);
  await expect(replies(page)).toHaveCount(2);
});
