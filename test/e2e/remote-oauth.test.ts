/**
 * With OAuth on, remote workers stay outside it: enrollment and the channel use the invite and the
 * worker token, while every remote-session call needs the caller's `remote:use` scope.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { connectHttp, startHttpServer, tempDir } from "../helpers/harness.ts";
import { startWorker } from "../helpers/remote.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "remote-pin-7731";

describe("remote workers with OAuth", () => {
  test("a worker enrolls without OAuth; remote sessions need remote:use", async () => {
    using dir = tempDir();
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state") },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const full = await obtainToken(server.url, PIN, "shell:read shell:write shell:execute remote:use");
      await using admin = await connectHttp(server.url, { authorization: `Bearer ${full.token}` });
      const code = (
        await admin.ok<{ data: { code: string } }>("remote_admin", { action: "invite", args: { name: "guarded" } })
      ).data.code;
      const worker = await startWorker(server.url, code);
      try {
        const sid = (
          await admin.ok<{ session_id: string }>("session_start", {
            target: "remote",
            machine: "guarded",
            workdir: worker.workdir,
          })
        ).session_id;
        expect(
          (await admin.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo via-oauth" }))
            .result.stdout,
        ).toBe("via-oauth\n");
        // A worker shell is found by shell_id alone only through the caller's own remote session:
        // another client (even with remote:use) gets the same answer as for an unknown shell.
        const shellId = (
          await admin.ok<{ result: { shell_id: string } }>("bash", {
            session_id: sid,
            command: "bash --norc",
            pty: true,
          })
        ).result.shell_id;
        expect(
          (await admin.ok<{ shell_id: string }>("read_persistent_shell_output", { shell_id: shellId, lines: 10 }))
            .shell_id,
        ).toBe(shellId);
        const other = await obtainToken(server.url, PIN, "shell:read shell:write shell:execute remote:use");
        await using stranger = await connectHttp(server.url, { authorization: `Bearer ${other.token}` });
        expect(await stranger.fails("read_persistent_shell_output", { shell_id: shellId })).toBe("shell_not_found");
        expect(await stranger.fails("kill_persistent_shell", { shell_id: shellId })).toBe("shell_not_found");
        await admin.ok("kill_persistent_shell", { shell_id: shellId });

        const limited = await obtainToken(server.url, PIN, "shell:read shell:write shell:execute");
        await using narrow = await connectHttp(server.url, { authorization: `Bearer ${limited.token}` });
        expect(
          await narrow.fails("session_start", { target: "remote", machine: "guarded", workdir: worker.workdir }),
        ).toBe("insufficient_scope");
        // Local sessions are unaffected by the missing scope.
        expect((await narrow.ok<{ target: string }>("session_start", { workdir: "." })).target).toBe("local");
      } finally {
        await worker.stop();
        worker.root[Symbol.dispose]();
      }
    } finally {
      await server.stop();
    }
  }, 60_000);
});
