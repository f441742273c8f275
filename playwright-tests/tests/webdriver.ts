// Safari's engine, driven through plain W3C WebDriver: Debian's WebKitGTK MiniBrowser under
// WebKitWebDriver, on a virtual X display (Xvfb). No WebKit build here runs WebGPU, but its
// JavaScript engine (JavaScriptCore), DOM and IndexedDB are Safari's.

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";

/** MiniBrowser, from libwebkit2gtk-4.1-0 (RADIXLM_MINIBROWSER overrides). */
export function miniBrowserPath(): string {
  const override = process.env.RADIXLM_MINIBROWSER;
  if (override) return override;
  for (const triplet of readdirSync("/usr/lib")) {
    const candidate = path.join("/usr/lib", triplet, "webkit2gtk-4.1", "MiniBrowser");
    if (existsSync(candidate)) return candidate;
  }
  throw new Error("MiniBrowser is missing: install libwebkit2gtk-4.1-0 (scripts/setup.sh does)");
}

function stop(child: ChildProcess): void {
  if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
}

/** Starts Xvfb on a free display; resolves to it (":N") once the server is up. */
export function startXvfb(): Promise<{ display: string; stop(): void }> {
  // -displayfd: Xvfb picks a free display and writes its number to fd 3 when it accepts clients.
  const xvfb = spawn("Xvfb", ["-displayfd", "3", "-screen", "0", "1280x900x24", "-nolisten", "tcp"], {
    stdio: ["ignore", "ignore", "pipe", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let stderr = "";
    xvfb.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    xvfb.on("error", (e) => reject(new Error(`Xvfb could not start (${e.message}): install xvfb (scripts/setup.sh does)`)));
    xvfb.on("exit", (code) => reject(new Error(`Xvfb exited with ${code}: ${stderr}`)));
    xvfb.stdio[3]?.on("data", (d: Buffer) => resolve({ display: `:${d.toString().trim()}`, stop: () => stop(xvfb) }));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

/** A running WebKitWebDriver. */
export class WebKitDriver {
  private constructor(
    readonly url: string,
    private readonly child: ChildProcess,
  ) {}

  static async start(display: string): Promise<WebKitDriver> {
    const port = await freePort();
    const child = spawn("WebKitWebDriver", [`--port=${port}`], { env: { ...process.env, DISPLAY: display }, stdio: "ignore" });
    const failed = new Promise<never>((_, reject) => {
      child.on("error", (e) => reject(new Error(`WebKitWebDriver could not start (${e.message}): install webkit2gtk-driver (scripts/setup.sh does)`)));
      child.on("exit", (code) => reject(new Error(`WebKitWebDriver exited with ${code}`)));
    });
    const driver = new WebKitDriver(`http://127.0.0.1:${port}`, child);
    const ready = (async () => {
      for (let i = 0; i < 100; i++) {
        const status = await fetch(`${driver.url}/status`).then((r) => r.json() as Promise<{ value?: { ready?: boolean } }>, () => null);
        if (status?.value?.ready) return driver;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error("WebKitWebDriver did not become ready in 10 s");
    })();
    return Promise.race([ready, failed]);
  }

  /** A new MiniBrowser window, started with `args` besides automation mode. */
  async session(args: string[]): Promise<WebDriverSession> {
    const caps = { capabilities: { alwaysMatch: { "webkitgtk:browserOptions": { binary: miniBrowserPath(), args: ["--automation", ...args] } } } };
    const created = await command<{ sessionId: string }>(this.url, "POST", "/session", caps);
    return new WebDriverSession(`${this.url}/session/${created.sessionId}`);
  }

  stop(): void {
    stop(this.child);
  }
}

async function command<T>(base: string, method: string, route: string, body?: unknown): Promise<T> {
  const response = await fetch(base + route, {
    method,
    headers: { "content-type": "application/json; charset=utf-8" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await response.json()) as { value: T & { error?: string; message?: string } };
  if (!response.ok) throw new Error(`WebDriver ${method} ${route}: ${json.value.error}: ${json.value.message}`);
  return json.value;
}

/** One browser window: the handful of WebDriver commands the smoke test needs. */
export class WebDriverSession {
  constructor(private readonly base: string) {}

  /** Navigates and waits for the load event (the "normal" page load strategy). */
  navigate(url: string): Promise<null> {
    return command(this.base, "POST", "/url", { url });
  }

  /** Runs `script` (a function body; `arguments` are `args`) in the page and returns its value. */
  execute<T>(script: string, ...args: unknown[]): Promise<T> {
    return command(this.base, "POST", "/execute/sync", { script, args });
  }

  setWindowSize(width: number, height: number): Promise<unknown> {
    return command(this.base, "POST", "/window/rect", { width, height });
  }

  /** The viewport as a PNG. */
  async screenshot(): Promise<Buffer> {
    return Buffer.from(await command<string>(this.base, "GET", "/screenshot"), "base64");
  }

  close(): Promise<unknown> {
    return command(this.base, "DELETE", "");
  }
}
