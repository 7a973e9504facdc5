import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, stopStateLeftovers, tempDir, type TempDir } from "../helpers/harness.ts";

// Commands run as `bash -c <command>`: not a login shell, not interactive, and no start-up file of
// the user's is read (they may be slow, print text, or change the environment under the model).
let dir: TempDir;
let home: string;
let mcp: McpHandle;
let sid: string;

const RC_FILES = [".bash_profile", ".bash_login", ".profile", ".bashrc", ".bash_logout"];
/** What a command prints about how its shell was started. */
const PROBE =
  `shopt -q login_shell && echo login=yes || echo login=no; case $- in *i*) echo interactive=yes;; *) echo ` +
  `interactive=no;; esac; echo "arg0=$0"`;

beforeAll(async () => {
  dir = tempDir("lsm-startup-");
  home = join(dir.path, "home");
  mkdirSync(home);
  mkdirSync(join(dir.path, "ws"));
  // Each start-up file leaves a mark if it is ever read.
  for (const f of RC_FILES) writeFileSync(join(home, f), `touch "${join(home, `read${f}`)}"\n`);
  mcp = await connectStdio({ workspace: join(dir.path, "ws"), state: join(dir.path, "state"), env: { HOME: home } });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});
afterAll(async () => {
  await mcp.ok("session_end", { session_id: sid }).catch(() => undefined);
  await mcp.close();
  stopStateLeftovers(join(dir.path, "state"));
  dir[Symbol.dispose]();
});

const marks = () => RC_FILES.filter((f) => existsSync(join(home, `read${f}`)));

test("a bounded command", async () => {
  const r = await mcp.ok<{ result: { stdout: string; exit_code: number } }>("bash", {
    session_id: sid,
    command: PROBE,
  });
  expect(r.result.stdout).toBe("login=no\ninteractive=no\narg0=/bin/bash\n");
  expect(marks()).toEqual([]);
});

test("a background job", async () => {
  const j = await mcp.ok<{ result: { job_id: string } }>("bash", { session_id: sid, command: PROBE, async_: true });
  const done = await mcp.ok<{ outputs: Array<{ output: string; job: { status: string } }> }>("job", {
    session_id: sid,
    poll: [j.result.job_id],
    wait_s: 30,
  });
  expect(done.outputs[0]).toMatchObject({
    output: "login=no\ninteractive=no\narg0=/bin/bash",
    job: { status: "succeeded" },
  });
  expect(marks()).toEqual([]);
});

test("a persistent shell's command", async () => {
  const s = await mcp.ok<{ result: { shell_id: string } }>("bash", {
    session_id: sid,
    command: `${PROBE}; echo probe-done; exec sleep 300`,
    pty: true,
  });
  const out = await mcp.ok<{ output: string; matched: boolean }>("read_persistent_shell_output", {
    session_id: sid,
    shell_id: s.result.shell_id,
    wait_for: "^probe-done$",
    timeout_s: 30,
  });
  expect(out.matched).toBe(true);
  expect(out.output).toContain("login=no\ninteractive=no\narg0=/bin/bash\nprobe-done");
  await mcp.ok("kill_persistent_shell", { session_id: sid, shell_id: s.result.shell_id });
  expect(marks()).toEqual([]);
});
