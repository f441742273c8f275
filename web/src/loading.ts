// Model load progress as a person reads it: bytes, speed and time left.

import type { LoadProgress } from "radixlm";

const MiB = 2 ** 20;

export function bytes(n: number): string {
  if (n >= 1024 * MiB) return `${(n / 1024 / MiB).toFixed(1)} GB`;
  if (n >= MiB) return `${(n / MiB).toFixed(1)} MB`;
  return `${Math.ceil(n / 1024)} KB`;
}

/** Turns progress events into a fraction and a line of text. */
export class LoadMeter {
  private readonly started = performance.now();

  read(p: LoadProgress): { fraction: number; text: string } {
    if (p.stage === "compile") return { fraction: 1, text: "Preparing the GPU kernels…" };
    const seconds = (performance.now() - this.started) / 1000;
    const speed = seconds > 0.2 ? p.loaded / seconds : 0;
    const verb = p.stage === "download" ? "Downloading" : "Loading from this device";
    if (p.total === undefined) return { fraction: 0, text: `${verb}: ${bytes(p.loaded)}` };
    const eta = speed > 0 ? Math.max(0, (p.total - p.loaded) / speed) : undefined;
    const rate = speed > 0 ? ` at ${bytes(speed)}/s` : "";
    const left = eta === undefined ? "" : `, about ${eta < 60 ? `${Math.ceil(eta)} s` : `${Math.ceil(eta / 60)} min`} left`;
    return { fraction: p.loaded / p.total, text: `${verb}: ${bytes(p.loaded)} of ${bytes(p.total)}${rate}${left}` };
  }
}
