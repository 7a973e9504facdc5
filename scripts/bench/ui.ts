/**
 * Human UI figures: keystroke echo through the terminal socket (on a quiet line, type one character
 * and time the first byte of its echo on the socket), the /ui first load (bytes on the wire, and time until the
 * dashboard is interactive in headless Chromium), and the executable's size.
 * Usage: bun scripts/bench/ui.ts [path/to/local-shell-mcp]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";
import { listeningOrigin, percentile, summary } from "./lib.ts";

const binary = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const dir = mkdtempSync(join(tmpdir(), "lsm-bench-ui-"));
const proc = Bun.spawn(
  [
    binary,
    "serve",
    "--auth-mode",
    "none",
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--workspace-root",
    dir,
    "--state-dir",
    join(dir, ".state"),
  ],
  { stderr: "pipe", stdout: "ignore" },
);
const base = await listeningOrigin(proc);

try {
  const client = new Client({ name: "bench", version: "0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  const call = async (name: string, args: Record<string, unknown>) =>
    (await client.callTool({ name, arguments: args })).structuredContent as Record<string, any>;
  const sid = (await call("session_start", { workdir: "." })).session_id as string;
  const shellId = (await call("bash", { session_id: sid, command: "bash --norc --noprofile", pty: true })).result
    .shell_id as string;

  // Keystroke echo: the shell's line discipline echoes each character back through tmux.
  const ws = new WebSocket(`${base.replace("http:", "ws:")}/ui/ws/terminals/${shellId}?cols=120&rows=36`, {
    headers: { origin: base },
    protocols: ["lsm-ui-terminal"],
  });
  ws.binaryType = "arraybuffer";
  let wake: (() => void) | undefined;
  ws.onmessage = (ev) => {
    if (ev.data instanceof ArrayBuffer) {
      wake?.();
    }
  };
  await new Promise<void>((r) => (ws.onopen = () => r()));
  await Bun.sleep(500);
  const echo: number[] = [];
  let lastData = performance.now();
  const prevWake = ws.onmessage;
  ws.onmessage = (ev) => {
    lastData = performance.now();
    prevWake?.call(ws, ev);
  };
  for (let i = 0; i < 200; i++) {
    // Wait for a quiet line so the next bytes can only be this keystroke's echo.
    while (performance.now() - lastData < 15) await Bun.sleep(5);
    const t0 = performance.now();
    const seen = new Promise<void>((r) => (wake = r));
    ws.send(new TextEncoder().encode(i % 40 === 39 ? "\x15" : "x"));
    await seen;
    echo.push(performance.now() - t0);
  }
  ws.close();
  console.log(summary("browser-terminal keystroke echo", echo));

  // First load: the bytes a browser fetches, and the time until the dashboard shows data.
  const index = await fetch(`${base}/ui/`);
  const html = await index.text();
  let wire = html.length;
  for (const m of html.matchAll(/(?:src|href)="(\/ui\/assets\/[^"]+)"/g)) {
    const r = await fetch(`${base}${m[1]}`, {
      headers: { "accept-encoding": "gzip" },
      decompress: false,
    } as RequestInit);
    wire += (await r.arrayBuffer()).byteLength;
  }
  console.log(`/ui first load on the wire: ${(wire / 1024).toFixed(1)} KiB (gzip)`);
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  const tti: number[] = [];
  for (let i = 0; i < 10; i++) {
    const page = await browser.newPage();
    const t0 = performance.now();
    await page.goto(`${base}/ui/`);
    await page.waitForFunction(
      `/running shells/.test(document.querySelector('[data-testid="dashboard"]')?.textContent ?? "")`,
    );
    tti.push(performance.now() - t0);
    await page.close();
  }
  await browser.close();
  console.log(summary("/ui load to interactive dashboard", tti));
  console.log(`executable: ${(statSync(binary).size / 1048576).toFixed(1)} MiB`);
  console.log(
    `p50 echo ${percentile(echo, 50).toFixed(2)} ms (target <= 15), load ` +
      `p50 ${percentile(tti, 50).toFixed(0)} ms (target <= 200)`,
  );
  // Persistent shells outlive the server by design; this one was only for the measurement.
  await call("kill_persistent_shell", { session_id: sid, shell_id: shellId });
  await client.close();
} finally {
  proc.kill();
  await proc.exited;
  rmSync(dir, { recursive: true, force: true });
}
