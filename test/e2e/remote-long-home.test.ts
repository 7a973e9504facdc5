/**
 * A worker installed with the default layout under a long $HOME (80 characters) starts persistent
 * shells and `bash pty=true`: its state dir's tmux socket path would pass the 104-byte limit of
 * bind(), so the socket lives in a short private folder (`/tmp/lsm-<uid>`, 0700, ours) instead.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { lstatSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { processesMatching, procText, stopProcessesUnder, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

type Bash = { mode: string; result: { exit_code: number; stdout: string; shell_id?: string } };

describe("a worker under a long $HOME", () => {
  let ws: TempDir;
  let state: TempDir;
  let base: TempDir;
  let ctl: Controller;
  let worker: Worker;
  let home = "";
  let socket = "";

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    base = tempDir("lsm-home-");
    home = join(base.path, "h".repeat(80 - base.path.length - 1));
    expect(home.length).toBe(80);
    mkdirSync(home);
    ctl = await startController({ state: state.path, workspace: ws.path });
    // The default layout: no state dir given, so it is derived from $HOME (XDG_STATE_HOME unset).
    worker = await enrolWorker(ctl, "far", {
      env: { HOME: home, LOCAL_SHELL_MCP_WORKER_STATE_DIR: "", XDG_STATE_HOME: "" },
    });
  }, 60_000);
  afterAll(async () => {
    await worker?.stop();
    await ctl?.dispose();
    if (socket) stopProcessesUnder(socket);
    stopProcessesUnder(home);
    for (const d of [worker?.root, ws, state, base]) d?.[Symbol.dispose]();
  }, 60_000);

  test("persistent shells and bash pty=true work; the socket is in a short private folder", async () => {
    const sid = (
      await ctl.mcp.ok<{ session_id: string }>("session_start", {
        target: "remote",
        machine: "far",
        workdir: worker.workdir,
      })
    ).session_id;
    const started = await ctl.mcp.ok<Bash>("bash", { session_id: sid, command: "bash --norc", pty: true });
    expect(started.mode).toBe("pty");
    const shellId = started.result.shell_id!;
    await ctl.mcp.ok("send_persistent_shell_input", {
      session_id: sid,
      shell_id: shellId,
      input_text: "echo long-$((40+2)) $HOME",
    });
    await waitFor(
      async () =>
        (
          await ctl.mcp.ok<{ output: string }>("read_persistent_shell_output", {
            session_id: sid,
            shell_id: shellId,
            lines: 200,
          })
        ).output.includes(`long-42 ${home}`),
      {
        what: "the shell's echo",
      },
    );
    // The worker's state really is under the long $HOME, and its tmux listens elsewhere.
    const tmux = processesMatching(" -S /tmp/lsm-").filter((pid) => procText(pid, "environ").includes(`HOME=${home}`));
    expect(tmux.length).toBeGreaterThan(0);
    const cmd = readFileSync(`/proc/${tmux[0]}/cmdline`, "utf8").split("\0");
    socket = cmd[cmd.indexOf("-S") + 1]!;
    expect(Buffer.byteLength(socket)).toBeLessThanOrEqual(100);
    const dir = lstatSync(join(socket, ".."));
    expect({ dir: dir.isDirectory(), mode: (dir.mode & 0o777).toString(8), uid: dir.uid }).toEqual({
      dir: true,
      mode: "700",
      uid: process.getuid!(),
    });
    expect(lstatSync(socket).isSocket()).toBe(true);
    const listed = await ctl.mcp.ok<{ shells: Array<{ shell_id: string }> }>("list_persistent_shells", {
      session_id: sid,
    });
    expect(listed.shells.map((s) => s.shell_id)).toContain(shellId);
    await ctl.mcp.ok("kill_persistent_shell", { session_id: sid, shell_id: shellId });
  }, 60_000);
});
