#!/usr/bin/env node
// The dev server for the browser package: a dependency-free static server on one fixed origin.
//
//   node scripts/serve.mjs [--port 8731] [--host 127.0.0.1]     (env RADIXLM_PORT overrides the port)
//
// The port is fixed because IndexedDB and the Cache API are per origin, port included: a cached
// model is only found again by a page served from the same host and port. WebGPU needs a secure
// context, which plain http gives only on 127.0.0.1/localhost.
//
// Every response carries the cross-origin isolation headers (COOP/COEP/CORP) so that a wasm build
// using threads (SharedArrayBuffer) can run under this server unchanged.
//
// With RADIXLM_SERVE_LOG=<file>, one line "METHOD PATH STATUS" is appended per request; the
// browser tests read it to check that a reload took the model from the cache, not the network.

import { createReadStream, appendFileSync, promises as fsp } from "node:fs";
import { createServer } from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** URL prefix -> directory under the repository root. */
const MOUNTS = [
  ["/pkg/", "pkg"],
  ["/models/", "models"],
  ["/test-models/", path.join("target", "test-models")],
  ["/harness/", path.join("playwright-tests", "harness")],
  // The browser benchmarks' peer engine (llama.cpp in wasm), from playwright-tests' packages.
  ["/wllama/", path.join("playwright-tests", "node_modules", "@wllama", "wllama", "esm")],
  // The chat app (web/, built by Vite) at the root: everything no mount above claims.
  ["/", path.join("web", "dist")],
];

const MIME = {
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".ts": "text/plain; charset=utf-8",
  ".wasm": "application/wasm",
  ".html": "text/html; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".txt": "text/plain; charset=utf-8",
  ".md": "text/markdown; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".gguf": "application/octet-stream",
  ".bin": "application/octet-stream",
};

// Everything is revalidated on every load, so an edited page or a rebuilt wasm is picked up
// without a hard reload. Models are not meant to live in the HTTP cache: the package keeps its
// own copy in the Cache API.
const CACHE_CONTROL = "no-cache";

function parseArgs(argv) {
  const out = { port: 8731, host: "127.0.0.1" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.includes("=") ? a.split(/=(.*)/s, 2) : [a, undefined];
    const value = () => {
      const v = inline ?? argv[++i];
      if (v === undefined) fail(`${flag} needs a value`);
      return v;
    };
    if (flag === "--port") out.port = parsePort(value(), "--port");
    else if (flag === "--host") out.host = value();
    else if (flag === "--help" || flag === "-h") {
      process.stdout.write("usage: node scripts/serve.mjs [--port 8731] [--host 127.0.0.1]\n");
      process.exit(0);
    } else fail(`unknown argument ${a} (usage: node scripts/serve.mjs [--port 8731] [--host 127.0.0.1])`);
  }
  if (process.env.RADIXLM_PORT) out.port = parsePort(process.env.RADIXLM_PORT, "RADIXLM_PORT");
  return out;
}

function parsePort(s, what) {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 1 || n > 65535) fail(`${what} must be a port number (1-65535), got ${JSON.stringify(s)}`);
  return n;
}

function fail(msg) {
  process.stderr.write(`radixlm: ${msg}\n`);
  process.exit(1);
}

const { port, host } = parseArgs(process.argv.slice(2));
const logFile = process.env.RADIXLM_SERVE_LOG || null;

function baseHeaders() {
  return {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
  };
}

/** Maps a URL path to a file path inside one mount, or null (outside every mount, or traversal). */
function resolvePath(urlPath) {
  for (const [prefix, dir] of MOUNTS) {
    if (!urlPath.startsWith(prefix)) continue;
    const base = path.join(ROOT, dir);
    const rest = urlPath.slice(prefix.length);
    // Refuse any segment that could climb out, before path.join normalises it away.
    const segments = rest.split("/");
    if (segments.some((s) => s === ".." || s === "." || s.includes("\\") || s.includes("\0"))) return { forbidden: true };
    const file = path.join(base, ...segments);
    if (file !== base && !file.startsWith(base + path.sep)) return { forbidden: true };
    return { file, base };
  }
  return null;
}

function send(req, res, status, body, extra = {}) {
  const buf = Buffer.from(body, "utf8");
  res.writeHead(status, {
    ...baseHeaders(),
    "Content-Type": "text/plain; charset=utf-8",
    "Content-Length": buf.length,
    "Cache-Control": CACHE_CONTROL,
    ...extra,
  });
  res.end(req.method === "HEAD" ? undefined : buf);
}

async function handle(req, res) {
  if (req.method !== "GET" && req.method !== "HEAD") {
    return send(req, res, 405, "method not allowed\n", { Allow: "GET, HEAD" });
  }
  let urlPath;
  try {
    urlPath = decodeURIComponent(new URL(req.url, "http://localhost").pathname);
  } catch {
    return send(req, res, 400, "bad request\n");
  }
  if (urlPath === "/favicon.ico") {
    // Browsers ask for it on every page; an empty answer keeps a 404 out of the console.
    res.writeHead(204, { ...baseHeaders(), "Cache-Control": CACHE_CONTROL });
    return res.end();
  }
  const hit = resolvePath(urlPath);
  if (hit === null) return send(req, res, 404, "not found\n");
  if (hit.forbidden) return send(req, res, 403, "forbidden\n");

  let file = hit.file;
  let stat;
  try {
    stat = await fsp.stat(file);
    if (stat.isDirectory()) {
      // A directory is served only through its index.html; there is no listing.
      file = path.join(file, "index.html");
      stat = await fsp.stat(file);
    }
    // A symlink pointing outside the mount is refused, like a ".." would be.
    const real = await fsp.realpath(file);
    const realBase = await fsp.realpath(hit.base);
    if (real !== realBase && !real.startsWith(realBase + path.sep)) return send(req, res, 403, "forbidden\n");
  } catch {
    return send(req, res, 404, "not found\n");
  }
  if (!stat.isFile()) return send(req, res, 404, "not found\n");

  const ext = path.extname(file).toLowerCase();
  const headers = {
    ...baseHeaders(),
    "Content-Type": MIME[ext] ?? "application/octet-stream",
    "Content-Length": stat.size,
    "Last-Modified": stat.mtime.toUTCString(),
    "Cache-Control": CACHE_CONTROL,
  };
  res.writeHead(200, headers);
  if (req.method === "HEAD") return res.end();
  // Streamed: a model is hundreds of MB and must never be read into memory whole.
  const stream = createReadStream(file);
  stream.on("error", () => res.destroy());
  res.on("close", () => stream.destroy());
  stream.pipe(res);
}

const server = createServer((req, res) => {
  if (logFile) {
    // Logged as the status line is written, so the line is in the file before the client has
    // seen a byte of the response (logging on "finish" would race a fast client).
    const writeHead = res.writeHead;
    res.writeHead = function (status, ...rest) {
      try {
        appendFileSync(logFile, `${req.method} ${req.url} ${status}\n`);
      } catch {
        // A log that cannot be written must not take the server down.
      }
      return writeHead.call(this, status, ...rest);
    };
  }
  handle(req, res).catch((err) => {
    if (!res.headersSent) send(req, res, 500, `internal error: ${err?.message ?? err}\n`);
    else res.destroy();
  });
});

server.on("error", (err) => {
  if (err.code === "EADDRINUSE") {
    fail(`port ${port} on ${host} is already in use (another serve.mjs?). Stop it, or pick another port with --port N or RADIXLM_PORT=N.`);
  }
  if (err.code === "EACCES") fail(`not allowed to listen on ${host}:${port}`);
  fail(`cannot listen on ${host}:${port}: ${err.message}`);
});

server.listen(port, host, () => {
  const shown = host.includes(":") ? `[${host}]` : host;
  process.stdout.write(`radixlm: serving http://${shown}:${port}/\n`);
});

for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    server.close();
    process.exit(0);
  });
}
