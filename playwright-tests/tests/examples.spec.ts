// The package's example pages work as shipped: the tool-calling page (pkg/examples/tools.html)
// loads the default model, pins its tool, and answers a conversion question through a call the
// page computes, its arguments valid and the result in the reply's conversation.

import { DEFAULT_MODEL_URL } from "../paths";
import { expect, test } from "./fixtures";

test("the tool-calling example converts through a call its page runs", async ({ page }) => {
  test.setTimeout(180_000);
  await page.goto(`/pkg/examples/tools.html?model=${encodeURIComponent(DEFAULT_MODEL_URL)}`);
  await expect(page.locator("#status")).toContainText("tokens are pinned", { timeout: 120_000 });
  await page.locator("#message").fill("How many miles is 42 km?");
  await page.locator("#send").click();
  const call = page.locator("#messages li.tool");
  await expect(call).toContainText("convert_units(", { timeout: 60_000 });
  // The page's converter got arguments it could use: a number and two of its units.
  await expect(call).toContainText(/→ \{"value":[0-9.]+,"unit":"(mi|km)"\}/);
  const answer = page.locator("#messages li.assistant");
  await expect(answer).toHaveCount(1, { timeout: 60_000 });
  await expect(answer).toContainText(/\d+ of \d+ prompt tokens cached/);
  await expect(page.locator("#send")).toBeEnabled();
});
