/**
 * A persistent shell outlives the server that started it (by design: a restarted server finds it),
 * and the harness stops it with the temp dir that holds its state, so no suite leaves a tmux
 * server behind once the socket is deleted with the dir.
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, processesMatching, tempDir } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

describe("persistent shell lifetime", () => {
  test("the shell survives its server's exit; disposing the temp dir stops its tmux server and tree", async () => {
    const dir = tempDir("lsm-lifetime-");
    const marker = `lsm-lifetime-${crypto.randomUUID()}`;
    try {
      const workspace = join(dir.path, "ws");
      const state = join(dir.path, "state");
      mkdirSync(workspace);
      const mcp = await connectStdio({ workspace, state });
      const serverPid = mcp.pid()!;
      const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      await mcp.ok("bash", { session_id: sid, command: `sleep 600; echo ${marker}`, pty: true });
      const socket = join(state, "tmux", "shells");
      const tmuxServer = () => processesMatching(`-S ${socket} `);
      const [tmuxPid] = await waitFor(
        () => {
          const found = tmuxServer();
          return found.length === 1 ? found : false;
        },
        { what: "the private tmux server" },
      );
      // The shell's runner and its bash -c both carry the command line with the marker.
      await waitFor(() => processesMatching(marker).length >= 2, { what: "the shell's processes" });

      await mcp.close();
      await waitFor(() => !pidAlive(serverPid), { what: "the server to exit on stdin EOF" });
      expect(tmuxServer()).toEqual([tmuxPid!]);
      expect(processesMatching(marker).length).toBeGreaterThanOrEqual(2);
    } finally {
      dir[Symbol.dispose]();
    }
    // processesMatching leaves zombies out: an exited tmux server may wait a while for init to reap it.
    expect(processesMatching(marker)).toEqual([]);
    expect(processesMatching(dir.path)).toEqual([]);
  });

  test(
    "a server left running whose state dir is the temp " + "dir itself is stopped when that dir is disposed",
    async () => {
      using workspace = tempDir("lsm-lifetime-ws-");
      const state = tempDir("lsm-lifetime-state-");
      const mcp = await connectStdio({ workspace: workspace.path, state: state.path });
      const serverPid = mcp.pid()!;
      try {
        expect(pidAlive(serverPid)).toBe(true);
        state[Symbol.dispose]();
        // The server is our child: the transport reaps it once it has exited.
        await waitFor(() => !pidAlive(serverPid), { what: "the forgotten server to be stopped" });
      } finally {
        await mcp.close();
      }
    },
  );
});
