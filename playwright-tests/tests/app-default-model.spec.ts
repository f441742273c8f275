// The chat app on the default model (SmolLM2-135M-Instruct), as the README's main command serves
// it: the model downloads, a pinned system prompt is reused by the reply, the Markdown list
// renders. The laptop and phone screenshots are the README's: with RADIXLM_UPDATE_SCREENSHOTS=1
// they are written to docs/screenshots/ too.

import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { Page, TestInfo } from "@playwright/test";
import { REPO_ROOT } from "../paths";
import { expect, test } from "./fixtures";

const SCREENSHOTS = path.join(REPO_ROOT, "docs", "screenshots");

async function keep(page: Page, testInfo: TestInfo, name: string): Promise<void> {
  const png = await page.screenshot();
  await testInfo.attach(name, { body: png, contentType: "image/png" });
  if (process.env.RADIXLM_UPDATE_SCREENSHOTS === "1") {
    mkdirSync(SCREENSHOTS, { recursive: true });
    writeFileSync(path.join(SCREENSHOTS, `${name}.png`), png);
  }
}

test("the default model answers in the chat app, reusing the pinned system prompt", async ({ page }, testInfo) => {
  // SwiftShader runs the 135M model at a few tokens per second.
  test.setTimeout(360_000);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto("/");
  await page.evaluate(() => {
    localStorage.setItem("radixlm.temperature", "0");
    localStorage.setItem("radixlm.maxTokens", "48");
  });
  await page.reload();
  const input = page.getByRole("textbox", { name: "Message" });
  await expect(input).toBeEnabled({ timeout: 120_000 });

  const panel = page.getByRole("complementary", { name: "Settings and cache" });
  await panel.getByRole("checkbox", { name: "Pin in the cache" }).check();
  const pinned = panel.locator("dt", { hasText: "Pinned pages" }).locator("xpath=following-sibling::dd[1]");
  await expect.poll(async () => Number(await pinned.textContent()), { timeout: 120_000 }).toBeGreaterThan(0);

  await input.fill("Give me three tips for a good night's sleep.");
  await input.press("Enter");
  await expect(page.getByRole("button", { name: "Stop" })).toBeHidden({ timeout: 300_000 });
  const reply = page.getByRole("article", { name: "Assistant" });
  // The reply is a numbered list (greedy, so the same one every run): Markdown renders it.
  await expect(reply.locator("ol li, ul li").first()).toBeVisible();
  const stats = (await reply.locator(".tools").textContent()) ?? "";
  const reused = Number(/(\d+) of (\d+) prompt tokens from the cache/.exec(stats)?.[1] ?? "0");
  expect(reused, stats).toBeGreaterThan(0);
  await expect(panel.locator("dt", { hasText: "Reused from the GPU" })).toBeVisible();
  await keep(page, testInfo, "chat-laptop");

  await page.setViewportSize({ width: 390, height: 844 });
  await expect(page.getByRole("button", { name: "Settings and cache" })).toBeVisible();
  await keep(page, testInfo, "chat-phone");
});
