/**
 * `serve` with a read-only `$HOME` and the default state dir (under ~/.local/state): it refuses to
 * start with exit 2 and one line naming `state_dir`, never a stack trace. With a writable
 * `--state-dir` it starts and warns that the helper cache (~/.cache) cannot be written.
 *
 * Root ignores permission bits, so as root the home is a read-only tmpfs in a private mount
 * namespace (unshare); as a plain user it is a 0555 folder.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { binary, IS_ROOT, serverEnv, type TempDir, tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

let dir: TempDir;
let home: string;
let workspace: string;

beforeAll(() => {
  dir = tempDir();
  home = join(dir.path, "home");
  workspace = join(dir.path, "ws");
  mkdirSync(home);
  mkdirSync(workspace);
  if (!IS_ROOT) chmodSync(home, 0o555);
});

afterAll(() => {
  if (!IS_ROOT) chmodSync(home, 0o755);
  dir?.[Symbol.dispose]();
});

/** The server's argv, run with `home` read-only. */
function readOnlyHome(args: string[]): string[] {
  const serve = [binary(), "serve", "--mode", "stdio", "--workspace-root", workspace, ...args];
  if (!IS_ROOT) return serve;
  const quoted = serve.map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
  return ["unshare", "--mount", "sh", "-c", `mount -t tmpfs -o ro,size=1m tmpfs '${home}' && exec ${quoted}`];
}

function env(): Record<string, string> {
  const e = serverEnv({ HOME: home, LOCAL_SHELL_MCP_LOG_LEVEL: "3" });
  delete e.XDG_STATE_HOME;
  delete e.XDG_CACHE_HOME;
  return e;
}

describe("serve with a read-only HOME", () => {
  test("the default state dir cannot be made: exit 2, one line naming state_dir, no stack trace", async () => {
    const proc = Bun.spawn(readOnlyHome([]), { env: env(), stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    const code = await proc.exited;
    const stderr = await new Response(proc.stderr).text();
    expect(code).toBe(2);
    expect(stderr).toContain("state_dir");
    expect(stderr).toContain("--state-dir");
    expect(stderr).not.toMatch(/^\s+at /m);
    expect(stderr.trim().split("\n")).toHaveLength(1);
  });

  test("with a writable --state-dir it starts and warns that the helper cache cannot be written", async () => {
    const state = join(dir.path, "state");
    const argv = readOnlyHome(["--state-dir", state]);
    const proc = Bun.spawn(argv, { env: env(), stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    let stderr = "";
    void (async () => {
      for await (const chunk of proc.stderr) stderr += new TextDecoder().decode(chunk);
    })();
    try {
      await waitFor(() => stderr.includes("serving MCP over stdio"), { what: "the stdio server to start" });
      expect(stderr).toContain("helper cache");
      expect(stderr).toContain("XDG_CACHE_HOME");
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
    }
  });
});
