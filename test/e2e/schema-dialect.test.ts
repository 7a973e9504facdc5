import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type McpHandle, openStdioSession, type StdioSession } from "../helpers/harness.ts";

// Lax clients (MCP Inspector CLI, the Python original's callers) send numbers as strings.
describe("numeric strings for nullable numbers", () => {
  let session: StdioSession;
  let mcp: McpHandle;
  let sid: string;

  beforeAll(async () => {
    session = await openStdioSession();
    ({ mcp, sid } = session);
  });

  afterAll(() => session?.close());

  test('"10" is taken as 10 for a nullable integer', async () => {
    const out = await mcp.ok<{ result: { stdout: string; truncated: boolean } }>("bash", {
      session_id: sid,
      command: "printf '%0100d' 0",
      max_output_bytes: "10",
    });
    expect(out.result.truncated).toBe(true);
    expect(out.result.stdout.length).toBeLessThanOrEqual(10);
  });

  test("a numeric string with blanks around it works too", async () => {
    const out = await mcp.ok<{ result: { exit_code: number } }>("bash", {
      session_id: sid,
      command: "true",
      timeout_s: " 5 ",
    });
    expect(out.result.exit_code).toBe(0);
  });

  test("non-numeric strings are still refused", async () => {
    for (const bad of ["ten", "", "5s", "0x10"]) {
      expect(await mcp.fails("bash", { session_id: sid, command: "true", max_output_bytes: bad })).toBe(
        "invalid_arguments",
      );
    }
  });
});
