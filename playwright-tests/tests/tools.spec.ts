// Tool calling through the package (CPU backend, the default model): a round trip whose call
// validates against the tool's schema (checked here by Ajv), whose second request reuses the
// first's pages and answers in text; calls streamed as one `delta.tool_calls`; tools pinned as a
// prefix that later requests start from; malformed tools refused by name.

import { Ajv } from "ajv";
import type { ChatCompletion, ChatMessageParam, FunctionTool } from "./radixlm";
import { DEFAULT_MODEL_URL } from "../paths";
import { expect, test } from "./fixtures";
import { loadEngine } from "./harness";

const UNITS = ["km", "mi", "kg", "lb", "C", "F"];

const TOOLS: FunctionTool[] = [
  {
    type: "function",
    function: {
      name: "convert_units",
      description: "Convert a quantity from one unit to another.",
      parameters: {
        type: "object",
        properties: { value: { type: "number" }, from_unit: { type: "string", enum: UNITS }, to_unit: { type: "string", enum: UNITS } },
        required: ["value", "from_unit", "to_unit"],
      },
    },
  },
  {
    type: "function",
    function: { name: "get_time", description: "The current time in a city.", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
  },
];

/** The app's side of a call: the conversion itself. */
function convert(args: { value: number; from_unit: string; to_unit: string }): string {
  const per: Record<string, number> = { km: 1, mi: 1.609344, kg: 1, lb: 0.45359237 };
  const { value, from_unit: from, to_unit: to } = args;
  if (from in per && to in per) return `${((value * per[from]!) / per[to]!).toFixed(2)} ${to}`;
  return JSON.stringify({ error: `cannot convert ${from} to ${to}` });
}

/** Each call names a tool and its arguments validate against that tool's parameters. */
function expectValidCalls(reply: ChatCompletion): void {
  const message = reply.choices[0].message;
  expect(reply.choices[0].finish_reason, JSON.stringify(message)).toBe("tool_calls");
  expect(message.content).toBeNull();
  expect(message.tool_calls?.length).toBeGreaterThan(0);
  for (const call of message.tool_calls ?? []) {
    expect(call.id).toMatch(/^call_/);
    const tool = TOOLS.find((t) => t.function.name === call.function.name);
    expect(tool, call.function.name).toBeDefined();
    const validate = new Ajv({ strict: false }).compile(tool?.function.parameters ?? {});
    const args: unknown = JSON.parse(call.function.arguments);
    expect(validate(args), `${call.function.arguments}: ${JSON.stringify(validate.errors)}`).toBe(true);
  }
}

test("a tool round trip: a required call validates, the result goes back, and the answer reuses the first request's pages", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const { engine, info } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  // SmolLM2's template has no tools of its own: radixlm's generic format.
  expect([info.toolFormat, info.toolCallOpener]).toEqual(["generic", "<"]);
  const messages: ChatMessageParam[] = [{ role: "user", content: "How many miles is 42 km?" }];
  const first = await engine.chat({ messages, tools: TOOLS, tool_choice: "required", temperature: 0, max_tokens: 96 });
  expectValidCalls(first);
  const calls = first.choices[0].message.tool_calls ?? [];
  messages.push({ role: "assistant", content: null, tool_calls: calls });
  for (const call of calls) {
    const args = JSON.parse(call.function.arguments) as { value: number; from_unit: string; to_unit: string; city?: string };
    messages.push({ role: "tool", tool_call_id: call.id, content: call.function.name === "convert_units" ? convert(args) : "12:00" });
  }
  // "none" asks for the answer in text (under "auto" this 135M model tends to call again).
  const second = await engine.chat({ messages, tools: TOOLS, tool_choice: "none", temperature: 0, max_tokens: 48 });
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  // The tools, the question and the call as generated: all of the first request but what
  // follows its last whole page.
  expect(cached + info.pageSize, JSON.stringify(second.usage)).toBeGreaterThan(first.usage.prompt_tokens + first.usage.completion_tokens);
  expect(second.choices[0].message.tool_calls).toBeUndefined();
  expect(second.choices[0].message.content ?? "").not.toBe("");
});

test("calls stream as one delta.tool_calls; text under auto streams as text", async ({ harness: page }) => {
  test.setTimeout(180_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const request = { messages: [{ role: "user" as const, content: "Convert 10 kg to pounds." }], tools: TOOLS, temperature: 0, max_tokens: 96 };
  const whole = await engine.chat({ ...request, tool_choice: { type: "function", function: { name: "convert_units" } } });
  expectValidCalls(whole);
  const { chunks, error } = await engine.streamChat({ ...request, tool_choice: { type: "function", function: { name: "convert_units" } } });
  expect(error).toBeNull();
  const withCalls = chunks.filter((c) => c.choices[0]?.delta.tool_calls);
  expect(withCalls).toHaveLength(1);
  const delta = withCalls[0]?.choices[0]?.delta;
  expect(delta?.role).toBe("assistant");
  expect(delta?.tool_calls?.map((c) => [c.index, c.function.name, c.function.arguments])).toEqual(
    (whole.choices[0].message.tool_calls ?? []).map((c, i) => [i, c.function.name, c.function.arguments]),
  );
  expect(chunks.some((c) => (c.choices[0]?.delta.content ?? "") !== ""), "no text streams for a call").toBe(false);
  expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("tool_calls");

  const text = await engine.streamChat({ ...request, messages: [{ role: "user", content: "Say hello." }], tool_choice: "none" });
  expect(text.error).toBeNull();
  expect(text.chunks.filter((c) => (c.choices[0]?.delta.content ?? "") !== "").length).toBeGreaterThan(1);
  expect(text.chunks.at(-1)?.choices[0]?.finish_reason).not.toBe("tool_calls");
});

test("tools pinned as a prefix are where requests with them start", async ({ harness: page }) => {
  test.setTimeout(120_000);
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const pinned = await engine.pin({ tools: TOOLS });
  expect(pinned).toBeGreaterThan(100);
  const reply = await engine.chat({ messages: [{ role: "user", content: "What time is it in Oslo?" }], tools: TOOLS, tool_choice: "required", temperature: 0, max_tokens: 64 });
  expect(reply.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(pinned);
  expectValidCalls(reply);
  expect((await engine.cacheStats()).pinnedPages).toBeGreaterThan(0);
});

test("malformed tools and tool messages are InvalidRequestErrors naming the problem", async ({ harness: page }) => {
  const { engine } = await loadEngine(page, { model: DEFAULT_MODEL_URL, backend: "cpu" });
  const user = [{ role: "user" as const, content: "Hi" }];
  const refused: Array<[Record<string, unknown>, RegExp]> = [
    [{ tools: [{ type: "function", function: { name: "two words" } }] }, /tools\[0\]\.function\.name must be/],
    [{ tools: TOOLS, tool_choice: { type: "function", function: { name: "nope" } } }, /"nope", which is not among the tools/],
    [{ tools: TOOLS, response_format: { type: "json_object" } }, /tool_choice: "none"/],
    [{ tools: "all" }, /tools must be an array/],
    [{ messages: [{ role: "tool", content: "1" }] }, /tool_call_id/],
    [{ messages: [{ role: "critic", content: "x" }] }, /role must be/],
  ];
  for (const [fields, says] of refused) {
    const outcome = await engine.tryChat({ messages: user, max_tokens: 4, ...fields } as never);
    expect(outcome.ok, JSON.stringify(fields)).toBe(false);
    if (outcome.ok) continue;
    expect(outcome.error.name).toBe("InvalidRequestError");
    expect(outcome.error.message).toMatch(says);
  }
  expect((await engine.cacheStats()).cachedPages, "nothing was computed").toBe(0);
});
