import { SMOLLM2_SHAPE_MODEL, testModelUrl } from "../paths";
import { expect, test } from "./fixtures";
import { chunkText, loadEngine } from "./harness";

const SENTENCES = [
  "The river bends twice before it reaches the old mill at the edge of the village.",
  "Every spring the orchard fills with white blossom and the sound of bees.",
  "A narrow road climbs the hill through fields of barley and rows of poplar trees.",
  "The baker opens his shop before dawn, and the smell of bread drifts down the street.",
  "On market days farmers bring cheese, honey, apples and wool from the valleys.",
  "The church clock has been five minutes slow for as long as anyone can remember.",
  "Children walk to the school by the bridge, where the water runs fast and clear.",
  "In winter the pond freezes and the whole village comes out to skate at night.",
  "The library keeps a map of the county drawn by hand two hundred years ago.",
  "Fishermen mend their nets on the quay while gulls circle above the harbour.",
  "A storm in the autumn of that year brought down the tallest oak on the common.",
  "The station master grows roses along the platform and names each one after a train.",
];

/** About 800 tokens of varied prose. */
const LONG_TEXT = [1, 2, 3]
  .map((part) => `Part ${part}. ` + SENTENCES.map((s, i) => `(${part}.${i + 1}) ${s}`).join(" "))
  .join("\n\n");

/**
 * How long an aborted request may take to end: a prefill step of 16 tokens takes a tenth of a
 * second on the CPU backend (seconds on a CPU-emulated GPU); this allows many.
 */
const SETTLE_MS = 60_000;

test("an aborted request stops within a step, in prefill and in decode, and leaves the engine answering as before", async ({ harness: page }) => {
  test.setTimeout(240_000);
  // Prefill in batches of 16 tokens, so a long prompt takes many steps to abort in the middle of.
  // A synthetic model of the default model's shapes: the same cost per step, and random weights
  // that do not end a reply early (its end-of-sequence token is one of 49152). Aborts land
  // between the worker's steps, whichever backend computes them: here the CPU, whose steps take a
  // tenth of the time they take on SwiftShader.
  const { engine } = await loadEngine(page, { model: testModelUrl(SMOLLM2_SHAPE_MODEL), maxBatch: 16, backend: "cpu" });
  const probe = { max_tokens: 16, temperature: 0, messages: [{ role: "user" as const, content: "Name three colours of the rainbow." }] };

  const reference = await test.step("a greedy answer on a fresh engine", () => engine.chat(probe));
  // The engine writes the answer's pages to IndexedDB once it is idle; a stats call is answered
  // between two of its steps, so after it the abort below lands in the prompt's prefill, not
  // while the request still waits its turn.
  const idleFrom = Date.now();
  await engine.cacheStats();
  console.log(`the engine was free ${Date.now() - idleFrom} ms after the answer (its pages written behind)`);

  await test.step("abort a long prompt 200 ms after sending it", async () => {
    const run = await engine.chatAbortedAfter(
      { max_tokens: 16, temperature: 0, messages: [{ role: "user", content: `Summarise this text:\n\n${LONG_TEXT}` }] },
      200,
      SETTLE_MS,
    );
    // Without this bound a request that ignores its abort would only show up as a test timeout.
    expect(run.outcome, `the request ended within ${SETTLE_MS / 1000} s of its abort`).not.toBeNull();
    const r = run.outcome;
    expect(r?.ok, "the request was aborted").toBe(false);
    if (!r || r.ok) return;
    console.log(`aborted ${run.abortedAfterMs.toFixed(0)} ms after sending; it ended ${run.endedAfterAbortMs?.toFixed(0)} ms later: ${JSON.stringify(r.error.fields)}`);
    expect(r.error.name).toBe("AbortError");
    expect(r.error.isNamedClass, "it is the package's AbortError class").toBe(true);
    const { promptTokens, promptTokensComputed, stepsAfterAbort } = r.error.fields;
    expect(promptTokens, "the prompt is long").toBeGreaterThan(600);
    expect(typeof promptTokensComputed).toBe("number");
    expect(promptTokensComputed, "it stopped in the middle of the prompt").toBeLessThan(promptTokens as number);
    expect(stepsAfterAbort).toBeLessThanOrEqual(1);
  });

  await test.step("abort a streamed reply after its third chunk", async () => {
    const { chunks, error, chunksAfterAbort } = await engine.streamChat(
      { max_tokens: 200, temperature: 0, messages: [{ role: "user", content: "Write a long story about a voyage across the sea." }] },
      { abortAfterChunks: 3 },
    );
    expect(chunks.length, "three chunks arrived before the abort").toBe(3);
    expect(chunksAfterAbort, "the next iteration threw").toBe(0);
    expect(error?.name).toBe("AbortError");
    expect(error?.isNamedClass).toBe(true);
    const { completionTokens, stepsAfterAbort } = error?.fields ?? {};
    expect(stepsAfterAbort).toBeLessThanOrEqual(1);
    expect(typeof completionTokens).toBe("number");
    expect(completionTokens).toBeLessThanOrEqual(chunks.length + 2);
    expect(chunks.map(chunkText).join("").length, "the reply had begun").toBeGreaterThan(0);
  });

  await test.step("the same greedy question gets the same answer as before the aborts", async () => {
    const again = await engine.chat(probe);
    expect(again.tokens).toEqual(reference.tokens);
    expect(again.choices[0].message.content).toBe(reference.choices[0].message.content);
  });
});
