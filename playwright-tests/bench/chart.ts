// A chart of TTFT against prompt or prefix length, as a standalone SVG (no dependencies): one
// series per engine and path (or scenario). The y axis is logarithmic: cold and warm differ by
// orders of magnitude.

export interface Series {
  name: string;
  color: string;
  dashed?: boolean;
  /** Points only (requests of a scenario): filled or square for radixlm's backends, hollow for the peer. */
  markers?: "filled" | "hollow" | "square";
  /** [prefix tokens, TTFT ms], in increasing prefix order. */
  points: Array<[number, number]>;
}

const W = 720;
const H = 420;
const M = { left: 70, right: 190, top: 40, bottom: 50 };

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function ttftChart(title: string, series: Series[], xLabel = "prefix tokens"): string {
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1])).filter((y) => y > 0);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [ly0, ly1] = [Math.floor(Math.log10(Math.min(...ys))), Math.ceil(Math.log10(Math.max(...ys)))];
  const px = (x: number) => M.left + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - M.left - M.right);
  const py = (y: number) => H - M.bottom - ((Math.log10(y) - ly0) / Math.max(1, ly1 - ly0)) * (H - M.top - M.bottom);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${M.left}" y="22" font-size="14" font-weight="600">${esc(title)}</text>`,
  ];
  for (let e = ly0; e <= ly1; e++) {
    const y = py(10 ** e);
    const label = 10 ** e >= 1000 ? `${10 ** (e - 3)} s` : `${10 ** e} ms`;
    out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${y}" y2="${y}" stroke="#e3e6ea"/>`, `<text x="${M.left - 8}" y="${y + 4}" text-anchor="end" fill="#5d6470">${label}</text>`);
  }
  // Every x of a few well-spaced lengths, or about eight round ticks for a scatter of prompt
  // lengths (whose labels would overlap).
  const distinct = [...new Set(xs)].sort((a, b) => a - b);
  const spaced = distinct.length <= 8 && distinct.every((x, i) => i === 0 || x - (distinct[i - 1] as number) >= (x1 - x0) / 10);
  const step = 10 ** Math.floor(Math.log10(Math.max(1, (x1 - x0) / 8)));
  const ticks = spaced ? distinct : Array.from({ length: Math.floor(x1 / step) - Math.ceil(x0 / step) + 1 }, (_, i) => (Math.ceil(x0 / step) + i) * step);
  for (const x of ticks.length > 12 ? ticks.filter((_, i) => i % Math.ceil(ticks.length / 8) === 0) : ticks) {
    out.push(`<line x1="${px(x)}" x2="${px(x)}" y1="${M.top}" y2="${H - M.bottom}" stroke="#f0f2f4"/>`, `<text x="${px(x)}" y="${H - M.bottom + 18}" text-anchor="middle" fill="#5d6470">${x}</text>`);
  }
  out.push(`<text x="${(M.left + W - M.right) / 2}" y="${H - 12}" text-anchor="middle">${esc(xLabel)}</text>`);
  out.push(`<text x="16" y="${(M.top + H - M.bottom) / 2}" transform="rotate(-90 16 ${(M.top + H - M.bottom) / 2})" text-anchor="middle">time to first token</text>`);
  series.forEach((s, i) => {
    const pts = s.points.filter((p) => p[1] > 0);
    const dash = s.dashed ? ` stroke-dasharray="6 4"` : "";
    const dot = s.markers === "hollow" ? `fill="#ffffff" stroke="${s.color}" stroke-width="2"` : `fill="${s.color}"`;
    if (!s.markers) out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2.5"${dash} points="${pts.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" ")}"/>`);
    const marker = (x: number, y: number, r: number) =>
      s.markers === "square" ? `<rect x="${(x - r).toFixed(1)}" y="${(y - r).toFixed(1)}" width="${2 * r}" height="${2 * r}" ${dot}/>` : `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${r}" ${dot}/>`;
    for (const [x, y] of pts) out.push(marker(px(x), py(y), s.markers ? 4.5 : 3.5));
    const ly = M.top + 10 + i * 22;
    const key = s.markers
      ? marker(W - M.right + 30, ly, 4.5)
      : `<line x1="${W - M.right + 16}" x2="${W - M.right + 44}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="2.5"${dash}/>`;
    out.push(key, `<text x="${W - M.right + 50}" y="${ly + 4}">${esc(s.name)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n") + "\n";
}
