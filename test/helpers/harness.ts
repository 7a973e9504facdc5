/**
 * Test harness: temp dirs, the compiled binary, and real MCP clients over stdio and HTTP.
 * Every helper returns something to close; tests call it in afterEach/afterAll or with `await using`.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { waitFor } from "./wait.ts";

export const ROOT = resolve(import.meta.dir, "..", "..");
/** LSM_TEST_BINARY lets parallel work test its own build without clobbering dist/. */
export const BINARY = process.env.LSM_TEST_BINARY ?? join(ROOT, "dist", "local-shell-mcp");

/** The compiled binary; the test command builds it before `bun test` runs. */
export function binary(): string {
  // Read again here: a benchmark may set LSM_TEST_BINARY after importing this module.
  const path = process.env.LSM_TEST_BINARY ?? BINARY;
  if (!existsSync(path)) throw new Error(`missing ${path}: run the build (bun scripts/build.ts) before the tests`);
  return path;
}

/** Whether the suite runs as root (CI does; scripts/test-as-user.sh runs it as a plain user). */
export const IS_ROOT = process.getuid?.() === 0;

/**
 * For `test.skipIf(needsRoot("why"))`: true when not root, after printing why the test is skipped,
 * so a run as a plain user reports each root-only test with its reason instead of failing it.
 */
export function needsRoot(why: string): boolean {
  if (!IS_ROOT) console.warn(`skip (needs root): ${why}`);
  return !IS_ROOT;
}

export interface TempDir {
  path: string;
  [Symbol.dispose](): void;
}

/**
 * A fresh private temp dir (symlinks resolved). On dispose, whatever still runs from it is stopped
 * (stopProcessesUnder) and then it is removed.
 */
export function tempDir(prefix = "lsm-test-"): TempDir {
  const path = realpathSync(mkdtempSync(join(tmpdir(), prefix)));
  return { path, [Symbol.dispose]: () => removeDir(path) };
}

export interface ServerEnv {
  workspace: string;
  state: string;
  /** Extra environment for the server process. */
  env?: Record<string, string>;
  /** Extra CLI arguments after `serve`. */
  args?: string[];
  /** clientInfo name the MCP client sends in initialize (default "lsm-test"). */
  clientName?: string;
}

/** Environment a server under test gets: ours minus LOCAL_SHELL_MCP_* and helper caches redirected. */
export function serverEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith("LOCAL_SHELL_MCP_")) env[k] = v;
  // Existing tests read the full structured form; the output-mode tests pass their own setting.
  return { ...env, LOCAL_SHELL_MCP_LOG_LEVEL: "1", LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: "full", ...extra };
}

export interface McpHandle {
  client: Client;
  /** Calls a tool and returns the raw result. */
  call(name: string, args?: Record<string, unknown>): Promise<CallToolResult>;
  /** Calls a tool that must succeed and returns its structured content. */
  ok<T = Record<string, unknown>>(name: string, args?: Record<string, unknown>): Promise<T>;
  /** Calls a tool that must fail and returns its stable error code. */
  fails(name: string, args?: Record<string, unknown>): Promise<string>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

function handle(client: Client, close: () => Promise<void>): McpHandle {
  const call = async (name: string, args: Record<string, unknown> = {}) =>
    (await client.callTool({ name, arguments: args })) as CallToolResult;
  return {
    client,
    call,
    async ok<T>(name: string, args: Record<string, unknown> = {}) {
      const r = await call(name, args);
      if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r.content)}`);
      return r.structuredContent as T;
    },
    async fails(name: string, args: Record<string, unknown> = {}) {
      const r = await call(name, args);
      if (!r.isError) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.structuredContent)}`);
      return errorCode(r);
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** The stable error code of a failed tool result. */
export function errorCode(r: CallToolResult): string {
  const meta = r._meta?.["local-shell-mcp/error"] as { code?: string } | undefined;
  if (meta?.code) return meta.code;
  const text = (r.content[0] as { text?: string } | undefined)?.text ?? "";
  return /^\[([a-z0-9_]+)\]/.exec(text)?.[1] ?? "unknown";
}

function serveArgs(mode: string, s: ServerEnv): string[] {
  return ["serve", "--mode", mode, "--workspace-root", s.workspace, "--state-dir", s.state, ...(s.args ?? [])];
}

/** Spawns `serve --mode stdio` and connects the official MCP client to it. */
export async function connectStdio(s: ServerEnv): Promise<McpHandle & { pid: () => number | null }> {
  const transport = new StdioClientTransport({
    command: binary(),
    args: serveArgs("stdio", s),
    env: serverEnv(s.env),
    stderr: "pipe",
  });
  const client = new Client({ name: s.clientName ?? "lsm-test", version: "0" });
  await client.connect(transport);
  const h = handle(client, async () => {
    await client.close().catch(() => undefined);
  });
  return Object.assign(h, { pid: () => transport.pid });
}

export interface StdioSession {
  mcp: McpHandle & { pid: () => number | null };
  /** The agent session started in the workspace. */
  sid: string;
  workspace: string;
  state: string;
  /** Stops the server and removes its temp dir with whatever still runs from it. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * The common start of an e2e suite: a stdio server on a fresh temp dir (`ws/` and `state/` inside)
 * with one agent session started in `workdir` (default "."); `prepare` fills the workspace before
 * the server starts.
 */
export async function openStdioSession(
  opts: {
    prefix?: string;
    workdir?: string;
    env?: Record<string, string>;
    args?: string[];
    prepare?: (workspace: string) => void;
  } = {},
): Promise<StdioSession> {
  const dir = tempDir(opts.prefix);
  const workspace = join(dir.path, "ws");
  const state = join(dir.path, "state");
  const close = async () => {
    await mcp?.close();
    dir[Symbol.dispose]();
  };
  let mcp: (McpHandle & { pid: () => number | null }) | undefined;
  try {
    mkdirSync(workspace);
    opts.prepare?.(workspace);
    mcp = await connectStdio({ workspace, state, env: opts.env, args: opts.args });
    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: opts.workdir ?? "." })).session_id;
    return { mcp, sid, workspace, state, close, [Symbol.asyncDispose]: close };
  } catch (e) {
    await close();
    throw e;
  }
}

export interface HttpServer {
  url: string;
  proc: Bun.Subprocess;
  stderr: () => string;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Spawns `serve --mode mcp` on a free loopback port and waits for it to listen. */
export async function startHttp(s: ServerEnv): Promise<HttpServer> {
  return startHttpServer(s, { mode: "mcp", auth: "none" });
}

export interface HttpServerKind {
  /** mcp (Streamable HTTP at /mcp) or http (REST debug API at /tools). */
  mode: "mcp" | "http";
  auth: "none" | "oauth";
  /** Admin PIN for the approval form (oauth). */
  pin?: string;
  /** --host to pass (default 127.0.0.1); null passes none, to test the default bind address. */
  host?: string | null;
  /** --port (default 0: a free one); a restart on the same port keeps the browser's origin. */
  port?: number;
}

/** Spawns an HTTP-mode server (MCP or REST, with or without OAuth) on a free loopback port. */
export async function startHttpServer(s: ServerEnv, kind: HttpServerKind): Promise<HttpServer> {
  const extra = kind.pin === undefined ? [] : ["--oauth-admin-pin", kind.pin];
  const host = kind.host === null ? [] : ["--host", kind.host ?? "127.0.0.1"];
  const port = ["--port", String(kind.port ?? 0)];
  const argv = [binary(), ...serveArgs(kind.mode, s), "--auth-mode", kind.auth, ...host, ...port, ...extra];
  const proc = Bun.spawn(argv, {
    env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...s.env }),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let text = "";
  const reader = proc.stderr.getReader();
  const decoder = new TextDecoder();
  const deadline = Date.now() + 15_000;
  let url: string | undefined;
  while (!url) {
    if (Date.now() > deadline) throw new Error(`server did not start: ${text}`);
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited before listening: ${text}`);
    text += decoder.decode(value);
    url = /listening on (http:\/\/[^\s]+)\/(?:mcp|tools)/.exec(text)?.[1];
  }
  void (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
  })();
  const stop = async () => {
    if (proc.exitCode === null) {
      proc.kill("SIGTERM");
      await proc.exited;
    }
  };
  return { url, proc, stderr: () => text, stop, [Symbol.asyncDispose]: stop };
}

/** Connects the official MCP client over Streamable HTTP. */
export async function connectHttp(url: string, headers: Record<string, string> = {}): Promise<McpHandle> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers } });
  const client = new Client({ name: "lsm-test", version: "0" });
  await client.connect(transport);
  return handle(client, async () => {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
  });
}

/**
 * A /proc file of a process found by a scan, or "" once the process has ended: a scan lists
 * processes of every test running at the same time, and any of them can end before it is read.
 */
export function procText(pid: number, file: "cmdline" | "environ" | "status" | "stat"): string {
  try {
    return readFileSync(`/proc/${pid}/${file}`, "utf8");
  } catch {
    return "";
  }
}

/** Pids of live processes whose command line contains `needle` (zombies excluded). */
export function processesMatching(needle: string): number[] {
  const out: number[] = [];
  for (const entry of new Bun.Glob("[0-9]*").scanSync({ cwd: "/proc", onlyFiles: false })) {
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      if (cmd.includes(needle) && state !== "Z") out.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return out;
}

/**
 * Kept for callers written before `waitFor`: the same polling under a generous deadline, answering
 * true or false. New tests call `waitFor` (test/helpers/wait.ts), whose failure names what never happened.
 */
export async function eventually(fn: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<boolean> {
  return waitFor(fn, { timeoutMs: Math.max(timeoutMs, 20_000) }).then(
    () => true,
    () => false,
  );
}

/** Pids of live processes whose whole command line (arguments joined by spaces) is exactly `cmdline`. */
export function exactProcesses(cmdline: string): number[] {
  return processesMatching(cmdline).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ") === cmdline;
    } catch {
      return false;
    }
  });
}

/** A snapshot of the temp dir; `added(prefix)` lists entries created since, ignoring older leftovers. */
export function tmpSnapshot(): { added(prefix: string): string[] } {
  const before = new Set(readdirSync(tmpdir()));
  return { added: (prefix) => readdirSync(tmpdir()).filter((n) => n.startsWith(prefix) && !before.has(n)) };
}

/** Stops what a test may leave behind in a state dir (see stopProcessesUnder). */
export function stopStateLeftovers(state: string): void {
  stopProcessesUnder(state);
}

/** Parent pid of `pid` from /proc, or undefined once it is gone. */
function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return undefined;
  }
}

/** `roots` and every live process below them. */
function withDescendants(roots: number[]): number[] {
  const all = new Set(roots);
  const pids = processesMatching("");
  for (let grew = true; grew; ) {
    grew = false;
    for (const pid of pids) {
      const parent = parentOf(pid);
      if (parent !== undefined && all.has(parent) && !all.has(pid)) {
        all.add(pid);
        grew = true;
      }
    }
  }
  return [...all];
}

const STOP_WAIT_MS = 10_000;

/**
 * Stops every process whose command line names `dir` or a path inside it, and their descendants: a
 * server under test that was not stopped, the private tmux server of a state dir there (its command
 * line carries `-S <state>/tmux/shells`, so it is found even after its socket is gone) with the
 * shells' runners below it, job supervisors (their spec lies under the state dir). Persistent
 * shells outlive their server by design (docs/shells-and-jobs.md), so without this a test that
 * leaves a shell and then deletes its temp dir leaves a tmux server running for good. SIGTERM
 * first, so runners stop their trees as they would in use; SIGKILL for what is left after 10 s.
 * Synchronous, because it runs in `Symbol.dispose`.
 */
export function stopProcessesUnder(dir: string): void {
  const named = processesMatching(dir).filter((pid) => pid !== process.pid && namesPathIn(pid, dir));
  if (named.length === 0) return;
  const targets = withDescendants(named);
  for (const pid of named) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      // Gone already.
    }
  }
  const until = Date.now() + STOP_WAIT_MS;
  while (targets.some(alive) && Date.now() < until) Bun.sleepSync(20);
  for (const pid of targets.filter(alive)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone meanwhile.
    }
  }
}

/** Whether an argument of `pid` is `dir` itself or contains a path below it (`/tmp/x` is not below `/tmp/x1`). */
function namesPathIn(pid: number, dir: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8")
      .split("\0")
      .some((arg) => arg === dir || arg.includes(`${dir}/`));
  } catch {
    return false;
  }
}

/** Whether `pid` is a live process (a zombie counts as gone: it only waits to be reaped). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** Stops what still runs from `path` (stopProcessesUnder), then removes it. */
export function removeDir(path: string): void {
  stopProcessesUnder(path);
  rmSync(path, { recursive: true, force: true });
}
