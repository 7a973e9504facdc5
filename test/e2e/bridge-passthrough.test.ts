import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { fixtureServer, FIXTURE, BUN, writeManifest } from "../bridge/helpers.ts";
import { RICH_TEXT, richStructured } from "../fixtures/rich-result.ts";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

type Listed = { name: string; inputSchema: Record<string, unknown> };

/** The fixture's own tools/list, straight from it with the SDK client: what must arrive unchanged. */
async function upstreamTools(): Promise<Map<string, Listed>> {
  const client = new Client({ name: "direct", version: "0" });
  await client.connect(new StdioClientTransport({ command: BUN, args: [FIXTURE] }));
  try {
    return new Map((await client.listTools()).tools.map((t) => [t.name, t as Listed]));
  } finally {
    await client.close();
  }
}

// What a client gets from an upstream is the upstream's: schemas with credential-named properties,
// results with credential-looking keys, long arrays and deep nesting arrive as sent. Only the byte
// limit cuts, and the result says so. The audit log keeps its own redaction.
describe("Agent Bridge passes upstream schemas and results through", () => {
  let ws: TempDir;
  let state: TempDir;
  let mcp: McpHandle;

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    writeManifest(state.path, { version: 1, mcpServers: { fx: fixtureServer() } });
    mcp = await connectStdio({ workspace: ws.path, state: state.path, args: ["--max-output-bytes", "200000"] });
  });

  afterAll(async () => {
    await mcp?.close();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  });

  test(
    "tools/list with token, api_key and password arguments " + "validates in the SDK client, schemas unchanged",
    async () => {
      const direct = await upstreamTools();
      // listTools() of the official client validates the whole answer; one bad schema fails it all.
      const listed = await waitFor(
        async () => {
          const tools = (await mcp.client.listTools()).tools as Listed[];
          return tools.find((t) => t.name === "agent_mcp__fx__login") ? tools : undefined;
        },
        { what: "the upstream's tools among the dynamic tools" },
      );
      expect(listed.find((t) => t.name === "bash")).toBeDefined();
      const login = listed.find((t) => t.name === "agent_mcp__fx__login")!;
      expect(login.inputSchema).toEqual(direct.get("login")!.inputSchema);
      expect(login.inputSchema.properties).toMatchObject({
        token: { type: "string" },
        api_key: { type: "string" },
        password: { type: "string" },
      });

      const rows = await mcp.ok<{ tools: Array<{ tool: string; input_schema: unknown }> }>("list_agent_mcp_tools", {
        server: "fx",
      });
      for (const row of rows.tools) expect(row.input_schema).toEqual(direct.get(row.tool)!.inputSchema);
      expect(rows.tools.some((r) => r.tool === "login")).toBe(true);

      const called = await mcp.ok<Record<string, unknown>>("agent_mcp__fx__login", { token: "abc", password: "p" });
      expect(called.content).toEqual([{ type: "text", text: "token of 3 characters" }]);
    },
  );

  test("a result with token_count, a 500-item array and 20-deep nesting arrives unchanged", async () => {
    for (const tool of ["call_agent_mcp_tool", "agent_mcp__fx__rich_result"]) {
      const out = await mcp.ok<Record<string, unknown>>(
        tool,
        tool === "call_agent_mcp_tool" ? { server: "fx", tool: "rich_result" } : {},
      );
      expect(out.structured_content).toEqual(richStructured());
      expect(JSON.stringify(out.structured_content)).toBe(JSON.stringify(richStructured()));
      expect(out.content).toEqual([{ type: "text", text: RICH_TEXT }]);
      expect(out.truncated).toBe(false);
      expect(out.notice).toBeNull();
    }
    // The audit log still redacts what it records of the same call.
    await mcp.ok("audit_tail", { limit: 1 }).catch(() => undefined);
    const auditPath = join(state.path, "audit_log", "audit.jsonl");
    await waitFor(() => readFileSync(auditPath, "utf8").includes("rich_result"), { what: "the call in the audit log" });
    expect(readFileSync(auditPath, "utf8")).not.toContain("hunter2-not-a-secret");
  });

  test("a cut at max_output_bytes is stated in the result", async () => {
    const out = await mcp.ok<Record<string, unknown>>("call_agent_mcp_tool", {
      server: "fx",
      tool: "huge",
      args: { bytes: 300_000 },
    });
    expect(out.truncated).toBe(true);
    expect((out.content as Array<{ text: string }>)[0]!.text.length).toBe(200_000);
    expect(out.notice).toBe("cut to max_output_bytes=200000: content[0] text cut from 300000 to 200000 bytes");
  });
});
