// The models the chat offers, and which one was chosen, kept across visits: a URL (a built-in
// model's too) in localStorage; a file from this device in the Cache API as well, because a File
// cannot be reopened after a reload and choosing it again at every visit would be a chore. Only
// the file in use is kept: a GGUF can be gigabytes.

/** A model the app names in its menu, served next to it. */
export interface BuiltInModel {
  id: string;
  label: string;
  url: string;
}

const SMOLLM2: BuiltInModel = { id: "smollm2", label: "SmolLM2 135M Instruct (default)", url: "/models/SmolLM2-135M-Instruct.Q4_1.gguf" };
const GEMMA3: BuiltInModel = {
  id: "gemma3",
  label: "Gemma 3 270M (base model, no chat template)",
  url: "/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf",
};

export const BUILT_IN: readonly BuiltInModel[] = [SMOLLM2, GEMMA3];

/** A GGUF at a URL, or a file from this device (`file` is absent when it comes from the kept copy). */
export type ModelChoice = { kind: "url"; url: string } | { kind: "file"; name: string; file?: Blob };

export const DEFAULT_CHOICE: ModelChoice = { kind: "url", url: SMOLLM2.url };

export const isDefault = (choice: ModelChoice): boolean => choice.kind === "url" && choice.url === SMOLLM2.url;

/** A remembered file whose copy is gone (evicted, never kept, or the Cache API refused it). */
export class FileNotKeptError extends Error {
  override readonly name = "FileNotKeptError";
  constructor(readonly fileName: string) {
    super(`The model file ${fileName} is no longer kept on this device: choose it again in the panel. The default model is loaded meanwhile.`);
  }
}

const KEY = "radixlm.model";
const FILE_CACHE = "radixlm-chat-file";
// Cache API keys are requests; this URL is never fetched.
const fileKey = (name: string): string => `/kept-model-file/${encodeURIComponent(name)}`;

/** The model to load first: the one ?model= names (for this visit only), else the one chosen last. */
export function firstChoice(): { choice: ModelChoice; remember: boolean } {
  const asked = new URLSearchParams(location.search).get("model");
  return asked ? { choice: { kind: "url", url: asked }, remember: false } : { choice: rememberedChoice(), remember: true };
}

function rememberedChoice(): ModelChoice {
  try {
    const saved: unknown = JSON.parse(localStorage.getItem(KEY) ?? "null");
    if (typeof saved === "object" && saved !== null) {
      const { kind, url, name } = saved as Record<string, unknown>;
      if (kind === "url" && typeof url === "string" && url) return { kind, url };
      if (kind === "file" && typeof name === "string" && name) return { kind, name };
    }
  } catch {
    // Unreadable: start from the default.
  }
  return DEFAULT_CHOICE;
}

// Keeping and dropping the file copy run one after the other, so a quick second choice cannot
// leave the first one's copy behind.
let fileWork: Promise<unknown> = Promise.resolve();
const queued = <T>(work: () => Promise<T>): Promise<T> => {
  const done = fileWork.then(work, work);
  fileWork = done.catch(() => {});
  return done;
};

/**
 * Remembers a choice that loaded. A newly chosen file is copied into the Cache API; resolves to
 * false when that failed (storage full or refused), and then only its name is remembered.
 */
export function rememberChoice(choice: ModelChoice): Promise<boolean> {
  // ?model= would override the choice at the next reload.
  const params = new URLSearchParams(location.search);
  if (params.has("model")) {
    params.delete("model");
    const query = params.toString();
    history.replaceState(history.state, "", `${location.pathname}${query ? `?${query}` : ""}${location.hash}`);
  }
  localStorage.setItem(KEY, JSON.stringify(choice.kind === "url" ? { kind: "url", url: choice.url } : { kind: "file", name: choice.name }));
  if (choice.kind === "file" && !choice.file) return Promise.resolve(true); // it came from the copy
  return queued(async () => {
    try {
      await caches.delete(FILE_CACHE);
      if (choice.kind === "url" || !choice.file) return true;
      const cache = await caches.open(FILE_CACHE);
      await cache.put(fileKey(choice.name), new Response(choice.file));
      return true;
    } catch {
      // No Cache API (an insecure context), or storage refused or full: a URL needs none.
      return choice.kind === "url";
    }
  });
}

/** What createEngine's `model` takes for a choice; rejects with FileNotKeptError when a remembered file's copy is gone. */
export async function modelSource(choice: ModelChoice): Promise<string | Blob> {
  if (choice.kind === "url") return choice.url;
  if (choice.file) return choice.file;
  const kept = await queued(async () => (await caches.open(FILE_CACHE)).match(fileKey(choice.name))).catch(() => undefined);
  if (!kept) throw new FileNotKeptError(choice.name);
  return kept.blob();
}
