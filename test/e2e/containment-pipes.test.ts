/**
 * Issue 9 item 1: output pipes held by something outside the command's tree never hold the call.
 * Here the outsider is a process the test starts; the command passes it its stdout over a unix
 * socket, and it keeps it open. The command and its tree end (the runner confirms that), so the
 * call must come back with the output, not wait for the pipe to close.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type McpHandle, openStdioSession, type StdioSession } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

let session: StdioSession;
let ws: string;
let mcp: McpHandle;
let sid: string;

beforeAll(async () => {
  session = await openStdioSession({ prefix: "lsm-pipes-" });
  ({ mcp, sid, workspace: ws } = session);
});
afterAll(() => session?.close());

// A holder started by the test, outside the command's tree: it receives a file descriptor over a
// unix socket (SCM_RIGHTS) and keeps it open until it is killed.
const HOLDER = `
import socket, sys, time
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sys.argv[1]); srv.listen(1)
conn, _ = srv.accept()
msg, fds, _, _ = socket.recv_fds(conn, 16, 4)
open(sys.argv[2], "w").write(str(len(fds)))
time.sleep(600)
`;
const SENDER = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
socket.send_fds(s, [b"x"], [1])
`;

describe("a pipe held open by an outsider", () => {
  test("does not hold the call once the command's tree is gone", async () => {
    const sock = join(ws, "holder.sock");
    const got = join(ws, "holder.got");
    writeFileSync(join(ws, "holder.py"), HOLDER);
    writeFileSync(join(ws, "sender.py"), SENDER);
    const holder = Bun.spawn(["python3", join(ws, "holder.py"), sock, got], {
      stdin: "ignore",
      stdout: "ignore",
      stderr: "inherit",
    });
    try {
      await waitFor(() => existsSync(sock), { what: "the holder to listen" });
      const started = performance.now();
      // The command hands its stdout to the holder, prints, and ends. Before the fix the call waited
      // for EOF on stdout, i.e. for the holder to exit: it hung until the tool watchdog.
      const call = mcp.ok<{ result: { ok: boolean; stdout: string; timed_out: boolean } }>("bash", {
        session_id: sid,
        command: "python3 sender.py holder.sock; echo finished",
        timeout_s: 60,
      });
      const r = await Promise.race([call, Bun.sleep(30_000).then(() => "hung" as const)]);
      // The holder really has the pipe (the check that the case was set up at all).
      expect(
        await waitFor(() => existsSync(got) && readFileSync(got, "utf8"), { what: "the holder to get the pipe" }),
      ).toBe("1");
      expect(holder.exitCode).toBeNull();
      expect(r).not.toBe("hung");
      if (r === "hung") return;
      expect(r.result.ok).toBe(true);
      expect(r.result.timed_out).toBe(false);
      expect(r.result.stdout).toBe("finished\n");
      // Well inside the 60 s timeout: the call did not wait for its deadline either.
      expect(performance.now() - started).toBeLessThan(30_000);
    } finally {
      holder.kill("SIGKILL");
    }
  });
});
