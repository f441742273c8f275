// Conversations kept in IndexedDB (database "radixlm-chat"). A conversation is a tree of
// messages: editing an earlier message adds a sibling, so the old branch stays reachable, and
// `leaf` says which path is shown and sent.

import { openDB, type DBSchema, type IDBPDatabase } from "idb";

/** What the engine did for one reply. */
export interface ReplyStats {
  promptTokens: number;
  /** Prompt tokens whose KV was still on the GPU. */
  reusedTokens: number;
  /** Prompt tokens whose KV came back from IndexedDB. */
  restoredTokens: number;
  prefilledTokens: number;
  completionTokens: number;
  ttftMs: number;
  decodeTokensPerS: number;
}

export interface Message {
  id: string;
  /** The message before it (null: the first). */
  parent: string | null;
  role: "user" | "assistant";
  content: string;
  created: number;
  /** An assistant reply cut short by the Stop button. */
  stopped?: boolean;
  stats?: ReplyStats;
}

export interface Conversation {
  id: string;
  title: string;
  created: number;
  updated: number;
  system: string;
  messages: Record<string, Message>;
  /** The last message of the branch on screen. */
  leaf: string | null;
}

interface ChatDb extends DBSchema {
  conversations: { key: string; value: Conversation };
}

const newId = (): string => crypto.randomUUID();

export function newConversation(system: string): Conversation {
  const now = Date.now();
  return { id: newId(), title: "New chat", created: now, updated: now, system, messages: {}, leaf: null };
}

/** The branch on screen, first message first. */
export function branch(c: Conversation): Message[] {
  const out: Message[] = [];
  for (let id = c.leaf; id; ) {
    const m: Message | undefined = c.messages[id];
    if (!m) break;
    out.push(m);
    id = m.parent;
  }
  return out.reverse();
}

/** Messages sharing `m`'s parent, oldest first (`m` among them). */
export function siblings(c: Conversation, m: Message): Message[] {
  return Object.values(c.messages)
    .filter((x) => x.parent === m.parent && x.role === m.role)
    .sort((a, b) => a.created - b.created);
}

/** Adds a message after `parent` and makes it the leaf. */
export function append(c: Conversation, parent: string | null, role: Message["role"], content: string): Message {
  const m: Message = { id: newId(), parent, role, content, created: Date.now() };
  c.messages[m.id] = m;
  c.leaf = m.id;
  c.updated = m.created;
  if (c.title === "New chat" && role === "user") c.title = content.replace(/\s+/g, " ").trim().slice(0, 48) || "New chat";
  return m;
}

/** Shows the branch through `m`: down to its newest descendant. */
export function showBranchOf(c: Conversation, m: Message): void {
  let leaf = m;
  for (;;) {
    const children = Object.values(c.messages).filter((x) => x.parent === leaf.id);
    const newest = children.sort((a, b) => b.created - a.created)[0];
    if (!newest) break;
    leaf = newest;
  }
  c.leaf = leaf.id;
}

/** The conversations of this browser, in IndexedDB. */
export class ConversationStore {
  private constructor(private readonly db: IDBPDatabase<ChatDb>) {}

  static async open(): Promise<ConversationStore> {
    const db = await openDB<ChatDb>("radixlm-chat", 1, {
      upgrade(db) {
        db.createObjectStore("conversations", { keyPath: "id" });
      },
    });
    return new ConversationStore(db);
  }

  /** Newest first. */
  async list(): Promise<Conversation[]> {
    return (await this.db.getAll("conversations")).sort((a, b) => b.updated - a.updated);
  }

  async save(c: Conversation): Promise<void> {
    // Structured clone of a plain object: what the page holds stays the page's.
    await this.db.put("conversations", structuredClone(c));
  }

  async remove(id: string): Promise<void> {
    await this.db.delete("conversations", id);
  }
}
