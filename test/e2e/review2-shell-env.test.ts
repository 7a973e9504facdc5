import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ROOT, connectStdio, type McpHandle, processesMatching, tempDir, type TempDir } from "../helpers/harness.ts";

type Read = { output: string; matched: boolean | null };

let dir: TempDir;
let mcp: McpHandle;
let sid: string;

beforeAll(async () => {
  dir = tempDir("lsm-review2-env-");
  mkdirSync(join(dir.path, "ws"));
  mcp = await connectStdio({ workspace: join(dir.path, "ws"), state: join(dir.path, "state") });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});

afterAll(async () => {
  await mcp.ok("session_end", { session_id: sid }).catch(() => undefined);
  await mcp.close();
  Bun.spawnSync([join(ROOT, "build", "native", "tmux"), "-S", join(dir.path, "state", "tmux", "shells"), "kill-server"], { stderr: "ignore" });
  dir[Symbol.dispose]();
});

test("a persistent shell's env values reach the shell but no process command line, and stay out of other shells", async () => {
  const secret = `s3cr3t-${process.pid}-${Date.now()}`;
  const started = await mcp.ok<{ result: { shell_id: string } }>("bash", {
    session_id: sid,
    pty: true,
    name: "env-first",
    env: { LSM_REVIEW2_TOKEN: secret },
    command: `echo "got:$LSM_REVIEW2_TOKEN:end"; exec sleep 7${process.pid}${Date.now() % 1000}`,
  });
  const first = await mcp.ok<Read>("read_persistent_shell_output", { shell_id: started.result.shell_id, session_id: sid, wait_for: "got:.*:end", timeout_s: 10 });
  expect(first.matched).toBe(true);
  expect(first.output).toContain(`got:${secret}:end`);
  // Neither the tmux client nor the tmux server it started keeps the value in its arguments.
  expect(processesMatching(secret)).toEqual([]);
  // The value belongs to that shell only: the server's global environment does not carry it.
  const other = await mcp.ok<{ result: { shell_id: string } }>("bash", {
    session_id: sid,
    pty: true,
    name: "env-second",
    command: `echo "other:\${LSM_REVIEW2_TOKEN:-unset}:end"; exec sleep 7${process.pid}${Date.now() % 1000}`,
  });
  const second = await mcp.ok<Read>("read_persistent_shell_output", { shell_id: other.result.shell_id, session_id: sid, wait_for: "other:.*:end", timeout_s: 10 });
  expect(second.output).toContain("other:unset:end");
  await mcp.ok("kill_persistent_shell", { shell_id: "env-first", session_id: sid });
  await mcp.ok("kill_persistent_shell", { shell_id: "env-second", session_id: sid });
}, 60_000);
