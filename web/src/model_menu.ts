// The panel's model menu: a built-in model, a GGUF file by URL, or one from this device. It says
// what the person asked for; main.ts loads it and tells the menu what is loaded.

import { BUILT_IN, type ModelChoice } from "./models";

const OTHER_URL = "url";
const OTHER_FILE = "file";

/** A URL the engine can fetch: http(s), absolute or relative to the page. */
function fetchable(text: string): boolean {
  if (!text) return false;
  try {
    return ["http:", "https:"].includes(new URL(text, location.href).protocol);
  } catch {
    return false;
  }
}

export class ModelMenu {
  private current: ModelChoice | undefined;
  private readonly el;

  /** `form` is the menu's form in index.html; `onLoad` is called with what the person asks to load. */
  constructor(form: HTMLFormElement, onLoad: (choice: ModelChoice) => void) {
    const find = <T extends Element>(selector: string): T => {
      const found = form.querySelector<T>(selector);
      if (!found) throw new Error(`the model menu lacks ${selector}`);
      return found;
    };
    const el = {
      select: find<HTMLSelectElement>("#model-choice"),
      urlRow: find<HTMLElement>("#model-url-row"),
      url: find<HTMLInputElement>("#model-url"),
      fileRow: find<HTMLElement>("#model-file-row"),
      file: find<HTMLInputElement>("#model-file"),
      // Names the file in use, which a file input cannot show again after a reload.
      note: find<HTMLElement>("#model-note"),
      load: find<HTMLButtonElement>("#model-load"),
    };
    this.el = el;
    el.select.replaceChildren(
      ...BUILT_IN.map((m) => new Option(m.label, m.id)),
      new Option("A GGUF file from a URL", OTHER_URL),
      new Option("A GGUF file on this device", OTHER_FILE),
    );
    el.select.addEventListener("change", () => this.showRows());
    el.url.addEventListener("input", () => el.url.setCustomValidity(""));
    el.file.addEventListener("change", () => el.file.setCustomValidity(""));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const choice = this.asked();
      if (choice) onLoad(choice);
    });
    this.showRows();
  }

  /** Shows the model loaded (or being loaded). */
  show(choice: ModelChoice): void {
    this.current = choice;
    if (choice.kind === "file") this.el.select.value = OTHER_FILE;
    else {
      const builtIn = BUILT_IN.find((m) => m.url === choice.url);
      this.el.select.value = builtIn?.id ?? OTHER_URL;
      if (!builtIn) this.el.url.value = choice.url;
    }
    this.showRows();
  }

  /** Whether a load may be asked for (not while one runs). */
  set enabled(on: boolean) {
    this.el.load.disabled = !on;
  }

  private showRows(): void {
    const which = this.el.select.value;
    this.el.urlRow.hidden = which !== OTHER_URL;
    this.el.fileRow.hidden = which !== OTHER_FILE;
    const file = which === OTHER_FILE && this.current?.kind === "file" ? this.current.name : undefined;
    this.el.note.hidden = file === undefined;
    this.el.note.textContent = file === undefined ? "" : `In use: ${file}`;
  }

  private asked(): ModelChoice | undefined {
    const which = this.el.select.value;
    if (which === OTHER_URL) {
      const url = this.el.url.value.trim();
      if (fetchable(url)) return { kind: "url", url };
      return this.refuse(this.el.url, "Enter the address of a GGUF file, such as https://example.com/model.gguf.");
    }
    if (which === OTHER_FILE) {
      const file = this.el.file.files?.[0];
      if (file) return { kind: "file", name: file.name, file };
      return this.refuse(this.el.file, "Choose a GGUF file.");
    }
    const builtIn = BUILT_IN.find((m) => m.id === which);
    return builtIn && { kind: "url", url: builtIn.url };
  }

  private refuse(field: HTMLInputElement, why: string): undefined {
    field.setCustomValidity(why);
    field.reportValidity();
    return undefined;
  }
}
