// Structured output through the package: replies under a `response_format` parse and validate
// against their JSON Schema (checked here by Ajv, not by the engine), greedy and sampled; a regex
// admitting any text leaves greedy decoding exactly as it was; a format the engine's grammar
// compiler refuses is an InvalidRequestError naming its problem, and nothing is computed.

import { readFileSync } from "node:fs";
import path from "node:path";
import { Ajv } from "ajv";
import type { ChatCompletion, ResponseFormat } from "./radixlm";
import { DEFAULT_MODEL_URL, REPO_ROOT } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine, type EngineHandle } from "./harness";

interface SchemaCase {
  prompt: string;
  schema: Record<string, unknown>;
}

// The same cases as the native test (crate/tests/structured_output.rs).
const CASES: SchemaCase[] = JSON.parse(readFileSync(path.join(REPO_ROOT, "crate", "tests", "fixtures", "json_schemas.json"), "utf8")).cases;

const schemaFormat = (schema: Record<string, unknown>): ResponseFormat => ({ type: "json_schema", json_schema: { name: "reply", schema, strict: true } });

function ask(engine: EngineHandle, prompt: string, request: { response_format?: ResponseFormat; temperature?: number; seed?: number; max_tokens?: number }): Promise<ChatCompletion> {
  return engine.chat({ temperature: 0, max_tokens: 160, ...request, messages: [{ role: "user", content: prompt }] });
}

/** The reply parsed and checked against the schema; a failure names the reply and Ajv's errors. */
function expectValid(reply: ChatCompletion, schema: Record<string, unknown>, what: string): void {
  const text = reply.choices[0].message.content ?? "";
  expect(reply.choices[0].finish_reason, `${what}: the grammar ended the reply: ${text}`).toBe("stop");
  let value: unknown;
  expect(() => (value = JSON.parse(text)), `${what}: JSON: ${text}`).not.toThrow();
  const validate = new Ajv({ strict: false }).compile(schema);
  expect(validate(value), `${what}: ${text} against its schema: ${JSON.stringify(validate.errors)}`).toBe(true);
  const mask = reply.stats.mask;
  expect(mask, `${what}: stats report the mask's cost`).not.toBeNull();
  expect(mask?.steps).toBe(reply.tokens.length + 1);
}

test("every reply under a JSON Schema validates, greedy and sampled (cpu, the default model)", async ({ harness: page }) => {
  test.setTimeout(300_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  for (const { prompt, schema } of CASES) {
    for (const [temperature, seed] of [[0, 0], [0.9, 1], [0.9, 2]]) {
      await test.step(`${prompt} at temperature ${temperature}, seed ${seed}`, async () => {
        const reply = await ask(engine, prompt, { response_format: schemaFormat(schema), temperature, seed });
        expectValid(reply, schema, `${prompt} (${temperature}/${seed})`);
      });
    }
  }
  // A JSON object, streamed: the deltas concatenated parse.
  const stream = await engine.streamChat({ temperature: 0, max_tokens: 160, response_format: { type: "json_object" }, messages: [{ role: "user", content: "Give a person's name and age as JSON." }] });
  expect(stream.error).toBeNull();
  const text = stream.chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  expect(typeof JSON.parse(text), text).toBe("object");
});

test("a regex admitting any text gives the unconstrained greedy reply, token for token (cpu)", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  for (const prompt of ["What is the capital of France?", "Write a haiku about the sea."]) {
    const free = await ask(engine, prompt, { max_tokens: 48 });
    const any = await ask(engine, prompt, { max_tokens: 48, response_format: { type: "regex", pattern: "(?s:.*)" } });
    expect(any.tokens, `${prompt}: ${JSON.stringify(any.choices[0].message.content)} vs ${JSON.stringify(free.choices[0].message.content)}`).toEqual(free.tokens);
    expect(free.stats.mask).toBeNull();
    expect(any.stats.mask?.steps).toBeGreaterThan(0);
  }
});

test("a JSON Schema reply validates on WebGPU (the default model)", async ({ harness: page }) => {
  test.setTimeout(300_000);
  const { engine, info } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "webgpu" });
  expect(info.backend).toBe("webgpu");
  const shape = CASES.find((c) => c.prompt === "Give me a shape.");
  if (!shape) throw new Error("json_schemas.json lost its shape case");
  const { prompt, schema } = shape;
  expectValid(await ask(engine, prompt, { response_format: schemaFormat(schema), max_tokens: 40 }), schema, prompt);
});

test("a format the grammar compiler refuses is an InvalidRequestError naming the problem, before any token", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const refused: Array<[ResponseFormat, RegExp]> = [
    [{ type: "xml" } as unknown as ResponseFormat, /response_format.*"text", "json_object"/],
    [{ type: "json_schema", json_schema: { name: "x" } } as unknown as ResponseFormat, /response_format\.json_schema/],
    [schemaFormat({ type: "object", properties: { a: { $ref: "#/nowhere" } } }), /nowhere/],
    [{ type: "regex", pattern: "(unclosed" }, /response_format/],
    [{ type: "grammar", grammar: "start: undefined_rule\n" }, /undefined_rule/],
  ];
  for (const [format, says] of refused) {
    const outcome = await engine.tryChat({ max_tokens: 8, response_format: format, messages: [{ role: "user", content: "Hi" }] });
    expect(outcome.ok, JSON.stringify(format)).toBe(false);
    if (outcome.ok) continue;
    expect(outcome.error.name).toBe("InvalidRequestError");
    expect(outcome.error.message).toMatch(says);
  }
  const stats = await engine.cacheStats();
  expect(stats.cachedPages, "the refused requests computed nothing").toBe(0);
});
