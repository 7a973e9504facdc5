/**
 * Issue 9 item 4: persistent shells must start when the server runs without a UTF-8 locale
 * (LANG and LC_ALL unset, as in many service environments). tmux refuses to start without one
 * unless it is told the terminal is UTF-8 (-u) and finds a UTF-8 LC_CTYPE.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type McpHandle, openStdioSession, type StdioSession } from "../helpers/harness.ts";

let session: StdioSession;
let mcp: McpHandle;
let sid: string;

beforeAll(async () => {
  // Empty values are what "unset" means to setlocale; the harness cannot remove inherited names.
  session = await openStdioSession({
    prefix: "lsm-shell-locale-",
    env: { LANG: "", LC_ALL: "", LC_CTYPE: "", LANGUAGE: "" },
  });
  ({ mcp, sid } = session);
});
afterAll(() => session?.close());

interface Read {
  output: string;
  status: string;
}

describe("persistent shells without a locale", () => {
  test("bash pty=true starts, shows UTF-8 text, and is killed", async () => {
    const r = await mcp.ok<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "printf 'caf\\xc3\\xa9 ok\\n'; exec sleep 1000",
      pty: true,
    });
    const id = r.result.shell_id;
    const out = await mcp.ok<Read>("read_persistent_shell_output", {
      session_id: sid,
      shell_id: id,
      offset: 0,
      wait_for: "ok",
      timeout_s: 20,
    });
    expect(out.output).toContain("café ok");
    expect(await mcp.ok<{ killed: boolean }>("kill_persistent_shell", { session_id: sid, shell_id: id })).toMatchObject(
      { killed: true },
    );
  });
});
