// How a conversation reaches the model: through the model's chat template, or, for a base model
// that has none, as plain text ("User: …" / "Assistant: …") that the model continues.

import { InvalidRequestError, type ChatMessage, type Engine, type GenerationStats, type SamplingRequest, type Usage } from "radixlm";
import type { ReplyStats } from "./conversations";

export type ReplyMode = "chat" | "plain";

export const NO_TEMPLATE_NOTICE =
  "This model has no chat template: it is a base model, which continues text rather than answering. " +
  "The conversation is sent to it as plain text (“User: …” and “Assistant: …” lines) and it writes the next “Assistant:” line.";

/** Whether the engine refused a chat because the model has no chat template. */
export function isNoChatTemplate(error: unknown): boolean {
  // The package raises it as an InvalidRequestError with no field of its own: its text tells.
  return error instanceof InvalidRequestError && /no chat template/i.test(error.message);
}

/** How the engine's model takes a conversation: through its chat template, or as plain text. */
export function replyModeOf(engine: Engine): ReplyMode {
  return engine.info.hasChatTemplate ? "chat" : "plain";
}

// The system prompt's text is a whole token prefix of every plain prompt (the blank line after it
// is not: tokenizers merge runs of newlines), so a pinned system prompt is reused.
const plainSystem = (system: string): string => system.trim();

/** The conversation as plain text, ending where the model is to write the assistant's turn. */
export function plainPrompt(system: string, turns: ChatMessage[]): string {
  const lines = plainSystem(system) ? [plainSystem(system), ""] : [];
  for (const m of turns) lines.push(`${m.role === "user" ? "User" : "Assistant"}: ${m.content}`);
  // No space after the colon: the model's first token carries it, as it does in earlier turns.
  lines.push("Assistant:");
  return lines.join("\n");
}

/** What the cache pins for a system prompt, as requests in this mode begin with it. */
export function pinnedPrefix(mode: ReplyMode, system: string): ChatMessage[] | string {
  return mode === "chat" ? [{ role: "system", content: system }] : plainSystem(system);
}

/** A piece of a streamed reply; the last carries the engine's figures. */
export interface ReplyPiece {
  text: string;
  stats?: ReplyStats;
}

function replyStats(usage: Usage | undefined, stats: GenerationStats | undefined): ReplyStats | undefined {
  if (!usage || !stats) return undefined;
  return {
    promptTokens: usage.prompt_tokens,
    reusedTokens: stats.reused_tokens,
    restoredTokens: stats.restored_tokens,
    prefilledTokens: stats.prefilled_tokens,
    completionTokens: usage.completion_tokens,
    ttftMs: stats.ttft_ms,
    decodeTokensPerS: stats.decode_tokens_per_s,
  };
}

/** Streams the assistant's next turn after `turns`, as `mode` says. */
export async function* streamReply(
  engine: Engine,
  mode: ReplyMode,
  system: string,
  turns: ChatMessage[],
  sampling: Omit<SamplingRequest, "stream" | "stop">,
): AsyncGenerator<ReplyPiece> {
  if (mode === "chat") {
    const messages: ChatMessage[] = system.trim() ? [{ role: "system", content: system }, ...turns] : turns;
    for await (const chunk of await engine.chat.completions.create({ ...sampling, messages, stream: true })) {
      yield { text: chunk.choices[0]?.delta.content ?? "", stats: replyStats(chunk.usage, chunk.stats) };
    }
    return;
  }
  // A base model goes on to write the person's next line too: the reply ends where that begins.
  const stream = await engine.completions.create({ ...sampling, prompt: plainPrompt(system, turns), stop: "\nUser:", stream: true });
  let started = false;
  for await (const chunk of stream) {
    let text = chunk.choices[0]?.text ?? "";
    if (!started) {
      text = text.trimStart();
      started = text !== "";
    }
    yield { text, stats: replyStats(chunk.usage, chunk.stats) };
  }
}
