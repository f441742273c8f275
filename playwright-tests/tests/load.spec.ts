import { existsSync, readFileSync, statSync } from "node:fs";
import { DEFAULT_MODEL_FILE, DEFAULT_MODEL_URL, SERVE_LOG } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine } from "./harness";
import type { LoadProgress } from "./radixlm";

/** Requests for `urlPath` the dev server has logged so far (any method). */
function servedCount(urlPath: string): number {
  if (!existsSync(SERVE_LOG)) return 0;
  return readFileSync(SERVE_LOG, "utf8")
    .split("\n")
    .filter((line) => line.split(" ")[1]?.split("?")[0] === urlPath).length;
}

/** The progress rules of the package's contract, for a file of `size` bytes. */
function expectProgressInOrder(progress: LoadProgress[], size: number, { downloaded }: { downloaded: boolean }): void {
  const of = (stage: LoadProgress["stage"]) => progress.filter((p) => p.stage === stage);
  for (const p of progress) expect(["download", "upload", "compile"]).toContain(p.stage);

  for (const stage of ["download", "upload", "compile"] as const) {
    let last = -1;
    for (const p of of(stage)) {
      expect(p.loaded, `${stage} progress never goes back`).toBeGreaterThanOrEqual(last);
      if (p.total !== undefined) expect(p.loaded, `${stage} progress never passes its total`).toBeLessThanOrEqual(p.total);
      last = p.loaded;
    }
  }

  const downloads = of("download");
  const uploads = of("upload");
  if (downloaded) {
    expect(downloads.length, "a model fetched over the network reports its download").toBeGreaterThan(0);
    expect(downloads.at(-1)).toMatchObject({ stage: "download", loaded: size, total: size });
  } else {
    expect(downloads, "a model from the Cache API is not downloaded").toEqual([]);
  }
  expect(uploads.length, "the upload is reported").toBeGreaterThan(0);
  expect(uploads.at(-1)).toMatchObject({ stage: "upload", loaded: size, total: size });

  // Bytes reach the GPU only after they arrived: no upload is ahead of the download before it.
  let downloadedSoFar = 0;
  for (const p of progress) {
    if (p.stage === "download") downloadedSoFar = p.loaded;
    if (p.stage === "upload" && downloaded) expect(p.loaded).toBeLessThanOrEqual(downloadedSoFar);
  }

  const firstCompile = progress.findIndex((p) => p.stage === "compile");
  const lastTransfer = progress.findLastIndex((p) => p.stage !== "compile");
  expect(firstCompile, "a compile event is reported").toBeGreaterThanOrEqual(0);
  expect(firstCompile, "compile comes after every download and upload event").toBeGreaterThan(lastTransfer);
}

test("the default model loads from its URL with progress in order, and after a reload comes from the Cache API", async ({ harness: page }) => {
  const size = statSync(DEFAULT_MODEL_FILE).size;
  // Chromium reports the requests of the page's workers here too, where the package fetches.
  const modelRequests: string[] = [];
  page.on("request", (r) => {
    if (new URL(r.url()).pathname === DEFAULT_MODEL_URL) modelRequests.push(`${r.method()} ${r.url()}`);
  });

  await test.step("load the model from its URL", async () => {
    const servedBefore = servedCount(DEFAULT_MODEL_URL);
    const { progress } = await loadEngine(page, { model: DEFAULT_MODEL_URL });
    expectProgressInOrder(progress, size, { downloaded: true });
    expect(modelRequests.length, "the model was fetched over the network").toBeGreaterThan(0);
    expect(servedCount(DEFAULT_MODEL_URL) - servedBefore, "the server logged the fetch").toBeGreaterThan(0);
  });

  await test.step("wait until the model is kept in the Cache API", async () => {
    await expect
      .poll(() => page.evaluate(async (url) => (await caches.match(new URL(url, location.href).href)) !== undefined, DEFAULT_MODEL_URL))
      .toBe(true);
  });

  await test.step("reload the page", async () => {
    await page.reload();
    await page.waitForFunction(() => typeof window.rx === "object");
  });

  await test.step("load the model again: from the Cache API, not the network", async () => {
    modelRequests.length = 0;
    const servedBefore = servedCount(DEFAULT_MODEL_URL);
    const { progress } = await loadEngine(page, { model: DEFAULT_MODEL_URL });
    expectProgressInOrder(progress, size, { downloaded: false });
    expect(modelRequests, "no request for the model went out").toEqual([]);
    expect(servedCount(DEFAULT_MODEL_URL), "the server saw no request for the model").toBe(servedBefore);
  });
});
