// The chat page: a conversation list, the conversation on screen, a composer, and a panel with
// the model menu, the system prompt, sampling settings and what the prefix cache holds and did
// for the last reply.

import { AbortError, createEngine, NoAdapterError, WebGPUUnavailableError, type ChatMessage, type DeviceLostEvent, type Engine, type ModelInfo } from "radixlm";
import { append, branch, newConversation, showBranchOf, siblings, ConversationStore, type Conversation, type Message, type ReplyStats } from "./conversations";
import { bytes, LoadMeter } from "./loading";
import { renderMarkdown } from "./markdown";
import { ModelMenu } from "./model_menu";
import { DEFAULT_CHOICE, FileNotKeptError, isDefault, modelSource, rememberChoice, firstChoice, type ModelChoice } from "./models";
import { isNoChatTemplate, NO_TEMPLATE_NOTICE, pinnedPrefix, replyModeOf, streamReply, type ReplyMode } from "./reply_mode";

const DEFAULT_SYSTEM = "You are a helpful assistant. Answer clearly and briefly.";
const WEBGPU_BROWSERS =
  "Chrome or Edge 113 or newer (Windows, macOS, ChromeOS), Chrome 121 or newer on Android, Safari 26 or newer (iPhone, iPad, Mac), or Firefox 141 or newer on Windows.";

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (!el) throw new Error(`the page lacks #${id}`);
  return el as T;
};

const ui = {
  app: $<HTMLDivElement>("app"),
  sidebar: $<HTMLElement>("sidebar"),
  panel: $<HTMLElement>("panel"),
  list: $<HTMLUListElement>("conversations"),
  newChat: $<HTMLButtonElement>("new-chat"),
  toggleSidebar: $<HTMLButtonElement>("toggle-sidebar"),
  togglePanel: $<HTMLButtonElement>("toggle-panel"),
  title: $<HTMLHeadingElement>("title"),
  modeNotice: $<HTMLParagraphElement>("mode-notice"),
  messages: $<HTMLElement>("messages"),
  composer: $<HTMLFormElement>("composer"),
  input: $<HTMLTextAreaElement>("input"),
  send: $<HTMLButtonElement>("send"),
  stop: $<HTMLButtonElement>("stop"),
  system: $<HTMLTextAreaElement>("system"),
  pin: $<HTMLInputElement>("pin"),
  temperature: $<HTMLInputElement>("temperature"),
  temperatureValue: $<HTMLOutputElement>("temperature-value"),
  maxTokens: $<HTMLInputElement>("max-tokens"),
  cacheStats: $<HTMLDListElement>("cache-stats"),
  engineInfo: $<HTMLDListElement>("engine-info"),
  replyStats: $<HTMLDListElement>("reply-stats"),
  screen: $<HTMLDivElement>("screen"),
  screenTitle: $<HTMLHeadingElement>("screen-title"),
  screenText: $<HTMLParagraphElement>("screen-text"),
  progress: $<HTMLProgressElement>("progress"),
  progressText: $<HTMLParagraphElement>("progress-text"),
  retry: $<HTMLButtonElement>("retry"),
  useDefault: $<HTMLButtonElement>("use-default"),
  toast: $<HTMLDivElement>("toast"),
  confirm: $<HTMLDialogElement>("confirm"),
  confirmText: $<HTMLParagraphElement>("confirm-text"),
};

declare global {
  interface Window {
    /** The chat's engine, for the browser console (and the tests' device-loss hook). */
    radixlmChat?: { engine: Engine };
  }
}

/** Settings kept across visits (the conversations themselves are in IndexedDB). */
const settings = {
  get temperature(): number {
    return Number(localStorage.getItem("radixlm.temperature") ?? "0.2");
  },
  set temperature(v: number) {
    localStorage.setItem("radixlm.temperature", String(v));
  },
  get maxTokens(): number {
    return Number(localStorage.getItem("radixlm.maxTokens") ?? "512");
  },
  set maxTokens(v: number) {
    localStorage.setItem("radixlm.maxTokens", String(v));
  },
  /** The system prompt new conversations start with. */
  get system(): string {
    return localStorage.getItem("radixlm.system") ?? DEFAULT_SYSTEM;
  },
  set system(v: string) {
    localStorage.setItem("radixlm.system", v);
  },
  /** The system prompt kept pinned in the cache, if any. */
  get pinned(): string | null {
    return localStorage.getItem("radixlm.pinned");
  },
  set pinned(v: string | null) {
    if (v === null) localStorage.removeItem("radixlm.pinned");
    else localStorage.setItem("radixlm.pinned", v);
  },
};

function showScreen(title: string, text: string, opts: { progress?: boolean; retry?: boolean; useDefault?: boolean } = {}): void {
  ui.screen.hidden = false;
  ui.screenTitle.textContent = title;
  ui.screenText.textContent = text;
  ui.progress.hidden = !opts.progress;
  ui.progressText.hidden = !opts.progress;
  ui.retry.hidden = !opts.retry;
  ui.useDefault.hidden = !opts.useDefault;
}

let toastTimer = 0;
function toast(text: string): void {
  ui.toast.textContent = text;
  ui.toast.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = window.setTimeout(() => (ui.toast.hidden = true), 6000);
}

/** Asks in a modal dialog; resolves to whether the person chose `yes`. */
function ask(text: string): Promise<boolean> {
  ui.confirmText.textContent = text;
  ui.confirm.returnValue = "";
  ui.confirm.showModal();
  return new Promise((resolve) => ui.confirm.addEventListener("close", () => resolve(ui.confirm.returnValue === "yes"), { once: true }));
}

const message = (error: unknown): string => (error instanceof Error ? error.message : String(error));

function dl(target: HTMLDListElement, rows: [string, string][]): void {
  target.replaceChildren(
    ...rows.flatMap(([k, v]) => {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = v;
      return [dt, dd];
    }),
  );
}

class ChatApp {
  private conversations: Conversation[] = [];
  private current: Conversation;
  private running: AbortController | null = null;
  /** The reply being written, until it is saved and its figures shown. */
  private replying: Promise<void> | null = null;

  constructor(
    private engine: Engine,
    private mode: ReplyMode,
    private readonly store: ConversationStore,
  ) {
    this.current = newConversation(settings.system);
  }

  /** Stops a reply in progress and waits until it is saved; nothing is sent until useEngine. */
  async halt(): Promise<void> {
    ui.input.disabled = true;
    ui.send.disabled = true;
    this.running?.abort();
    await this.replying;
  }

  /** Goes on with another model: the conversations stay, the pinned system prompt is pinned in it. */
  async useEngine(engine: Engine, mode: ReplyMode): Promise<void> {
    this.engine = engine;
    this.mode = mode;
    dl(ui.replyStats, [["—", ""]]);
    await this.ready();
  }

  async start(): Promise<void> {
    this.conversations = await this.store.list();
    const first = this.conversations[0];
    if (first) this.current = first;
    ui.temperature.value = String(settings.temperature);
    ui.temperatureValue.value = settings.temperature.toFixed(2);
    ui.maxTokens.value = String(settings.maxTokens);
    this.wire();
    await this.ready();
  }

  /** Pins the kept system prompt in the engine, shows the conversation and opens the composer. */
  private async ready(): Promise<void> {
    if (settings.pinned !== null) await this.pin(settings.pinned);
    this.render();
    await this.refreshCache();
    ui.input.disabled = false;
    ui.send.disabled = false;
    ui.input.focus();
  }

  private wire(): void {
    ui.composer.addEventListener("submit", (e) => {
      e.preventDefault();
      void this.sendInput();
    });
    ui.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        void this.sendInput();
      }
    });
    ui.input.addEventListener("input", () => this.fitInput());
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.running) this.running.abort();
    });
    ui.stop.addEventListener("click", () => this.running?.abort());
    ui.newChat.addEventListener("click", () => {
      this.current = newConversation(settings.system);
      this.closeDrawers();
      this.render();
      ui.input.focus();
    });
    ui.toggleSidebar.addEventListener("click", () => this.toggle(ui.sidebar, ui.toggleSidebar, "sidebar-open"));
    ui.togglePanel.addEventListener("click", () => this.toggle(ui.panel, ui.togglePanel, "panel-open"));
    ui.system.addEventListener("change", () => void this.setSystem(ui.system.value));
    ui.pin.addEventListener("change", () => void (ui.pin.checked ? this.pin(this.current.system) : this.unpin()));
    ui.temperature.addEventListener("input", () => {
      settings.temperature = Number(ui.temperature.value);
      ui.temperatureValue.value = settings.temperature.toFixed(2);
    });
    ui.maxTokens.addEventListener("change", () => {
      const n = Math.round(Number(ui.maxTokens.value));
      settings.maxTokens = Number.isFinite(n) && n >= 1 ? Math.min(n, 4096) : 512;
      ui.maxTokens.value = String(settings.maxTokens);
    });
  }

  private toggle(drawer: HTMLElement, button: HTMLButtonElement, cls: string): void {
    const open = !ui.app.classList.contains(cls);
    this.closeDrawers();
    ui.app.classList.toggle(cls, open);
    button.setAttribute("aria-expanded", String(open));
    if (open) drawer.querySelector<HTMLElement>("button, textarea, input, select")?.focus();
  }

  private closeDrawers(): void {
    ui.app.classList.remove("sidebar-open", "panel-open");
    ui.toggleSidebar.setAttribute("aria-expanded", "false");
    ui.togglePanel.setAttribute("aria-expanded", "false");
  }

  private fitInput(): void {
    ui.input.style.height = "auto";
    ui.input.style.height = `${Math.min(ui.input.scrollHeight, 200)}px`;
  }

  private async setSystem(text: string): Promise<void> {
    const wasPinned = settings.pinned !== null && settings.pinned === this.current.system;
    this.current.system = text;
    settings.system = text;
    if (wasPinned) {
      await this.unpin();
      await this.pin(text);
    }
    if (Object.keys(this.current.messages).length > 0) await this.save();
    this.render();
  }

  private async pin(system: string): Promise<void> {
    if (settings.pinned !== null && settings.pinned !== system) await this.unpin();
    try {
      await this.engine.cache.pin(pinnedPrefix(this.mode, system));
      settings.pinned = system;
    } catch (error) {
      toast(`Could not pin the system prompt: ${message(error)}`);
      settings.pinned = null;
    }
    ui.pin.checked = settings.pinned !== null;
    await this.refreshCache();
  }

  private async unpin(): Promise<void> {
    const pinned = settings.pinned;
    settings.pinned = null;
    ui.pin.checked = false;
    if (pinned !== null) await this.engine.cache.unpin(pinnedPrefix(this.mode, pinned));
    await this.refreshCache();
  }

  private async sendInput(): Promise<void> {
    const text = ui.input.value.trim();
    if (!text || this.running) return;
    ui.input.value = "";
    this.fitInput();
    append(this.current, this.current.leaf, "user", text);
    await this.reply();
  }

  /** Resends an earlier user message, edited: a new branch from the same point. */
  private async resend(original: Message, text: string): Promise<void> {
    if (this.running) return;
    append(this.current, original.parent, "user", text);
    await this.reply();
  }

  private reply(): Promise<void> {
    this.replying = this.replyNow().finally(() => (this.replying = null));
    return this.replying;
  }

  /** Streams the assistant's reply to the branch on screen. */
  private async replyNow(): Promise<void> {
    const conv = this.current;
    const turns: ChatMessage[] = branch(conv).map((m) => ({ role: m.role, content: m.content }));
    const answer = append(conv, conv.leaf, "assistant", "");
    this.running = new AbortController();
    this.setRunning(true);
    this.render();
    await this.save();
    const bubble = ui.messages.querySelector<HTMLElement>(`[data-id="${answer.id}"] .content`);
    let frame = 0;
    const paint = () => {
      frame = 0;
      if (bubble) renderMarkdown(bubble, answer.content);
      this.scrollToEnd();
    };
    try {
      const pieces = streamReply(this.engine, this.mode, conv.system, turns, {
        signal: this.running.signal,
        temperature: settings.temperature,
        top_p: 0.9,
        max_tokens: settings.maxTokens,
      });
      for await (const piece of pieces) {
        answer.content += piece.text;
        if (piece.stats) answer.stats = piece.stats;
        frame ||= requestAnimationFrame(paint);
      }
    } catch (error) {
      if (error instanceof AbortError) answer.stopped = true;
      else {
        answer.content += answer.content ? "\n\n" : "";
        answer.stopped = true;
        toast(isNoChatTemplate(error) ? NO_TEMPLATE_NOTICE : message(error));
      }
    } finally {
      this.running = null;
      this.setRunning(false);
      if (frame) cancelAnimationFrame(frame);
    }
    await this.save();
    this.render();
    await this.refreshCache(answer.stats);
  }

  private setRunning(running: boolean): void {
    ui.send.hidden = running;
    ui.stop.hidden = !running;
    if (!running) ui.input.focus();
  }

  private async save(): Promise<void> {
    await this.store.save(this.current);
    this.conversations = [this.current, ...this.conversations.filter((c) => c.id !== this.current.id)];
    this.renderList();
  }

  private render(): void {
    ui.title.textContent = this.current.title;
    ui.system.value = this.current.system;
    ui.pin.checked = settings.pinned !== null && settings.pinned === this.current.system;
    this.renderList();
    const items = branch(this.current).map((m) => this.renderMessage(m));
    if (items.length === 0) {
      const empty = document.createElement("p");
      empty.className = "empty";
      empty.textContent = "Ask anything. The model runs on this device's GPU; nothing you type leaves it.";
      items.push(empty);
    }
    ui.messages.replaceChildren(...items);
    this.scrollToEnd();
  }

  private renderMessage(m: Message): HTMLElement {
    const article = document.createElement("article");
    article.className = `message ${m.role}`;
    article.dataset.id = m.id;
    article.setAttribute("aria-label", m.role === "user" ? "You" : "Assistant");
    const content = document.createElement("div");
    content.className = "content";
    if (m.role === "assistant") renderMarkdown(content, m.content);
    else content.textContent = m.content;
    article.append(content);
    const tools = document.createElement("div");
    tools.className = "tools";
    const family = siblings(this.current, m);
    if (family.length > 1) {
      const at = family.findIndex((x) => x.id === m.id);
      const step = (delta: number, label: string, text: string) => {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = text;
        b.setAttribute("aria-label", label);
        const target = family[at + delta];
        b.disabled = !target || this.running !== null;
        b.addEventListener("click", () => {
          if (!target) return;
          showBranchOf(this.current, target);
          void this.save();
          this.render();
        });
        return b;
      };
      const where = document.createElement("span");
      where.textContent = `${at + 1} / ${family.length}`;
      tools.append(step(-1, "Previous version", "‹"), where, step(1, "Next version", "›"));
    }
    if (m.role === "user") {
      const edit = document.createElement("button");
      edit.type = "button";
      edit.textContent = "Edit";
      edit.setAttribute("aria-label", "Edit and resend");
      edit.disabled = this.running !== null;
      edit.addEventListener("click", () => this.editMessage(article, m));
      tools.append(edit);
    } else if (m.stopped) {
      const note = document.createElement("span");
      note.className = "small";
      note.textContent = "stopped";
      tools.append(note);
    }
    if (m.stats) {
      const s = document.createElement("span");
      s.className = "small";
      s.textContent = `${m.stats.reusedTokens + m.stats.restoredTokens} of ${m.stats.promptTokens} prompt tokens from the cache · first token ${(m.stats.ttftMs / 1000).toFixed(1)} s`;
      tools.append(s);
    }
    article.append(tools);
    return article;
  }

  private editMessage(article: HTMLElement, m: Message): void {
    const form = document.createElement("form");
    form.className = "edit";
    const area = document.createElement("textarea");
    area.value = m.content;
    area.setAttribute("aria-label", "Edited message");
    const send = document.createElement("button");
    send.type = "submit";
    send.className = "primary";
    send.textContent = "Send";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.textContent = "Cancel";
    cancel.addEventListener("click", () => this.render());
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const text = area.value.trim();
      if (text) void this.resend(m, text);
    });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        form.requestSubmit();
      } else if (e.key === "Escape") this.render();
    });
    form.append(area, send, cancel);
    article.replaceChildren(form);
    area.focus();
  }

  private renderList(): void {
    const items = this.conversations.map((c) => {
      const li = document.createElement("li");
      li.className = c.id === this.current.id ? "current" : "";
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = c.title;
      if (c.id === this.current.id) open.setAttribute("aria-current", "true");
      open.addEventListener("click", () => {
        if (this.running) return;
        this.current = c;
        this.closeDrawers();
        this.render();
      });
      const rename = document.createElement("button");
      rename.type = "button";
      rename.textContent = "✎";
      rename.setAttribute("aria-label", `Rename ${c.title}`);
      rename.addEventListener("click", () => this.renameInPlace(li, c));
      const remove = document.createElement("button");
      remove.type = "button";
      remove.textContent = "✕";
      remove.setAttribute("aria-label", `Delete ${c.title}`);
      remove.addEventListener("click", () => void this.remove(c));
      li.append(open, rename, remove);
      return li;
    });
    ui.list.replaceChildren(...items);
  }

  /** Turns a list entry into a name field: Enter or leaving it saves, Esc keeps the old name. */
  private renameInPlace(li: HTMLLIElement, c: Conversation): void {
    const form = document.createElement("form");
    form.className = "rename";
    const field = document.createElement("input");
    field.type = "text";
    field.value = c.title;
    field.setAttribute("aria-label", "Conversation name");
    let done = false;
    const finish = (save: boolean) => {
      if (done) return;
      done = true;
      const title = field.value.trim();
      if (save && title && title !== c.title) {
        c.title = title;
        void this.store.save(c).then(() => this.render());
      } else this.renderList();
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      finish(true);
    });
    field.addEventListener("keydown", (e) => {
      if (e.key === "Escape") {
        e.preventDefault();
        e.stopPropagation();
        finish(false);
      }
    });
    field.addEventListener("blur", () => finish(true));
    form.append(field);
    li.replaceChildren(form);
    field.select();
  }

  private async remove(c: Conversation): Promise<void> {
    if (this.running && c.id === this.current.id) return;
    if (!(await ask(`"${c.title}" and all its replies will be deleted from this device.`))) return;
    await this.store.remove(c.id);
    this.conversations = this.conversations.filter((x) => x.id !== c.id);
    if (c.id === this.current.id) this.current = this.conversations[0] ?? newConversation(settings.system);
    this.render();
  }

  private scrollToEnd(): void {
    ui.messages.scrollTop = ui.messages.scrollHeight;
  }

  private async refreshCache(last?: ReplyStats): Promise<void> {
    const s = await this.engine.cache.stats();
    const used = s.totalPages - s.freePages;
    const rows: [string, string][] = [
      ["GPU pages", `${used} of ${s.totalPages} (${s.pageSize} tokens each)`],
      ["Pinned pages", String(s.pinnedPages)],
      ["Pinned prefix", settings.pinned === null ? "none" : "the system prompt"],
    ];
    if (s.spill) rows.push(["Saved on this device", `${s.spill.records} pages, ${bytes(s.spill.bytes)} (${s.spill.format})`]);
    else rows.push(["Saved on this device", s.spillNote ?? "off"]);
    dl(ui.cacheStats, rows);
    if (last) {
      dl(ui.replyStats, [
        ["Reused from the GPU", `${last.reusedTokens} tokens`],
        ["Restored from this device", `${last.restoredTokens} tokens`],
        ["Computed", `${last.prefilledTokens} tokens`],
        ["First token after", `${(last.ttftMs / 1000).toFixed(2)} s`],
        ["Decode", `${last.decodeTokensPerS.toFixed(1)} tokens/s`],
      ]);
    }
  }
}

let reloadMeter = new LoadMeter();

/** Shows the engine's move to a new GPU device; the conversations and the app stay as they are. */
function deviceLost(event: DeviceLostEvent): void {
  if (event.state === "reloading") {
    if (!event.progress) reloadMeter = new LoadMeter();
    showScreen("The GPU was reset — reloading the model", "Your conversations are safe. This takes a few seconds.", { progress: true });
    if (event.progress) {
      const { fraction, text } = reloadMeter.read(event.progress);
      ui.progress.value = fraction;
      ui.progressText.textContent = text;
    }
  } else if (event.state === "ready") {
    ui.screen.hidden = true;
    toast("The model is back on the GPU.");
  } else {
    retry = () => location.reload();
    showScreen("The model failed to load", `The GPU was reset and the model could not be loaded again: ${message(event.error)}`, { retry: true });
  }
}

// ?backend=webgpu|cpu overrides the engine's choice (WebGPU on a hardware GPU, else the CPU).
const askedBackend = new URLSearchParams(location.search).get("backend");
const backend = askedBackend === "webgpu" || askedBackend === "cpu" ? askedBackend : "auto";

let engine: Engine | undefined;
let chat: ChatApp | undefined;
let loading = false;
let store: ConversationStore | undefined;
const conversations = async (): Promise<ConversationStore> => (store ??= await ConversationStore.open());

const menu = new ModelMenu($<HTMLFormElement>("model-form"), (choice) => void load(choice, true));

function showEngine(info: ModelInfo, size: number | undefined, mode: ReplyMode): void {
  dl(ui.engineInfo, [
    ["Model", info.modelName],
    ["Size", size === undefined ? "—" : bytes(size)],
    ["Replies", mode === "chat" ? "Chat, with the model's template" : "Plain text: no chat template"],
    ["Runs on", info.backend === "cpu" ? `CPU (WebAssembly, ${info.threads} thread${info.threads === 1 ? "" : "s"})` : "GPU (WebGPU)"],
    [info.backend === "cpu" ? "Instructions" : "Adapter", info.adapter || "—"],
  ]);
  ui.modeNotice.hidden = mode === "chat";
  ui.modeNotice.textContent = mode === "chat" ? "" : NO_TEMPLATE_NOTICE;
}

/**
 * Loads a model in place of the one loaded; the conversations stay. `remember`: keep the choice
 * for the next visit (not one given by ?model=).
 */
async function load(choice: ModelChoice, remember: boolean): Promise<void> {
  if (loading) return;
  loading = true;
  menu.enabled = false;
  const meter = new LoadMeter();
  ui.progress.value = 0;
  ui.progressText.textContent = "";
  showScreen("Loading the model", "It runs on this device; nothing you type leaves it.", { progress: true });
  try {
    await chat?.halt();
    // One model in memory at a time: the next may not fit beside the last.
    const old = engine;
    engine = undefined;
    window.radixlmChat = undefined;
    await old?.dispose();
    let model: string | Blob;
    try {
      model = await modelSource(choice);
    } catch (error) {
      if (!(error instanceof FileNotKeptError)) throw error;
      toast(error.message);
      choice = DEFAULT_CHOICE;
      model = await modelSource(choice);
    }
    menu.show(choice);
    // A URL's size comes with the load: its last download or upload events carry the file's size.
    let size = model instanceof Blob ? model.size : undefined;
    const conversationStore = await conversations();
    const next = await createEngine({
      model,
      backend,
      onProgress: (p) => {
        if (p.stage !== "compile" && p.total !== undefined) size = p.total;
        const { fraction, text } = meter.read(p);
        ui.progress.value = fraction;
        ui.progressText.textContent = text;
      },
      onDeviceLost: deviceLost,
    });
    engine = next;
    window.radixlmChat = { engine: next };
    const mode = replyModeOf(next);
    showEngine(next.info, size, mode);
    if (remember) {
      const name = choice.kind === "file" ? choice.name : "";
      void rememberChoice(choice).then((kept) => {
        if (!kept) toast(`${name} could not be kept on this device (storage is full or refused): after a reload, choose it again.`);
      });
    }
    ui.screen.hidden = true;
    if (chat) await chat.useEngine(next, mode);
    else {
      chat = new ChatApp(next, mode, conversationStore);
      await chat.start();
    }
    if (mode === "plain") toast("This model has no chat template: replies continue the conversation as plain text.");
  } catch (error) {
    if (error instanceof WebGPUUnavailableError) {
      const where = error instanceof NoAdapterError ? ` WebGPU works in ${WEBGPU_BROWSERS}` : "";
      showScreen("This browser has no WebGPU", `${error.message}${where}`);
      return;
    }
    const again = choice;
    retry = () => void load(again, remember);
    showScreen("The model failed to load", message(error), { retry: true, useDefault: !isDefault(choice) });
  } finally {
    loading = false;
    menu.enabled = true;
  }
}

function boot(): void {
  const { choice, remember } = firstChoice();
  void load(choice, remember);
}

/** What "Try again" does: load again, or (after a failed reload onto a new device) start over. */
let retry = boot;
ui.retry.addEventListener("click", () => retry());
ui.useDefault.addEventListener("click", () => void load(DEFAULT_CHOICE, true));

// The app has no error it expects to go uncaught: say so on screen rather than fail silently.
window.addEventListener("error", (e) => toast(`Something went wrong: ${e.message}`));
window.addEventListener("unhandledrejection", (e) => toast(`Something went wrong: ${message(e.reason)}`));

// The app's files are kept by a service worker (and the model by the package, in the Cache
// API), so the page opens and answers offline after one visit.
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/sw.js").catch((error: unknown) => console.warn(`radixlm chat: no offline copy (${message(error)})`));
}

boot();
