import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { type HttpServer, ROOT, startHttp, tempDir, type TempDir } from "../helpers/harness.ts";

let ws: TempDir;
let state: TempDir;
let out: TempDir;
let server: HttpServer;

beforeAll(async () => {
  ws = tempDir("lsm-ws-");
  state = tempDir("lsm-state-");
  out = tempDir("lsm-conf-");
  server = await startHttp({ workspace: ws.path, state: state.path });
});

afterAll(async () => {
  await server?.stop();
  for (const d of [ws, state, out]) d?.[Symbol.dispose]();
});

const REQUIRED = [
  "server-initialize",
  "ping",
  "logging-set-level",
  "tools-list",
  "server-sse-multiple-streams",
  "dns-rebinding-protection",
];

test("MCP conformance suite (server scenarios) passes except the documented fixture scenarios", async () => {
  const proc = Bun.spawn(
    [
      process.execPath,
      "--bun",
      join(ROOT, "node_modules", ".bin", "conformance"),
      "server",
      "--url",
      `${server.url}/mcp`,
      "--expected-failures",
      join(import.meta.dir, "conformance-expected-failures.yml"),
      "-o",
      out.path,
    ],
    { cwd: out.path, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } },
  );
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  const text = stdout + stderr;
  for (const name of REQUIRED) expect(text).toMatch(new RegExp(`✓ ${name}: \\d+ passed, 0 failed`));
  if (code !== 0) console.error(text.slice(-4000));
  expect(code).toBe(0);
}, 180_000);
