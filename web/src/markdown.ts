// Replies as Markdown, rendered with `marked` and sanitised with DOMPurify (a model's output is
// untrusted text: no script, handler or javascript: URL survives). Code blocks get a copy button.

import DOMPurify from "dompurify";
import { marked } from "marked";

marked.setOptions({ gfm: true, breaks: true });

export function renderMarkdown(target: HTMLElement, text: string): void {
  const html = marked.parse(text, { async: false });
  const fragment = DOMPurify.sanitize(html, { RETURN_DOM_FRAGMENT: true });
  for (const a of fragment.querySelectorAll("a")) {
    a.target = "_blank";
    a.rel = "noopener noreferrer";
  }
  for (const pre of fragment.querySelectorAll("pre")) {
    const wrap = document.createElement("div");
    wrap.className = "code";
    pre.replaceWith(wrap);
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", "Copy code");
    copy.addEventListener("click", () => {
      void navigator.clipboard?.writeText(pre.textContent ?? "").then(
        () => (copy.textContent = "Copied"),
        () => (copy.textContent = "Copy failed"),
      );
      setTimeout(() => (copy.textContent = "Copy"), 1500);
    });
    wrap.append(copy, pre);
  }
  target.replaceChildren(fragment);
}
