import { describe, expect, test } from "bun:test";
import { JSONRPCRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { isPlainRequest } from "../../src/core/mcp-stdio-transport.ts";

describe("stdio request short cut", () => {
  const accepted = [
    { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "bash", arguments: { command: "echo hi" } } },
    { jsonrpc: "2.0", id: "a", method: "ping" },
    { jsonrpc: "2.0", id: 0, method: "tools/list", params: {} },
    { jsonrpc: "2.0", id: -3, method: "x", params: { deep: { _meta: 1 } } },
  ];
  const refused = [
    null,
    [],
    "x",
    { jsonrpc: "2.0", method: "notifications/initialized" },
    { jsonrpc: "2.0", id: 1, result: {} },
    { jsonrpc: "1.0", id: 1, method: "ping" },
    { jsonrpc: "2.0", id: 1.5, method: "ping" },
    { jsonrpc: "2.0", id: 2 ** 60, method: "ping" },
    { jsonrpc: "2.0", id: null, method: "ping" },
    { jsonrpc: "2.0", id: true, method: "ping" },
    { jsonrpc: "2.0", id: 1, method: 5 },
    { jsonrpc: "2.0", id: 1, method: "ping", extra: 1 },
    { jsonrpc: "2.0", id: 1, method: "ping", params: null },
    { jsonrpc: "2.0", id: 1, method: "ping", params: [] },
    { jsonrpc: "2.0", id: 1, method: "ping", params: "x" },
    // _meta has a shape of its own: such a request takes the full schema.
    { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "bash", _meta: { progressToken: 1 } } },
  ];

  test("takes plain requests the full schema accepts", () => {
    for (const m of accepted) {
      expect(JSONRPCRequestSchema.safeParse(m).success).toBe(true);
      expect(isPlainRequest(m)).toBe(true);
    }
  });

  test("leaves everything else to the full schema, and never takes what it refuses", () => {
    for (const m of refused) expect(isPlainRequest(m)).toBe(false);
    for (const m of [...accepted, ...refused])
      if (isPlainRequest(m)) expect(JSONRPCRequestSchema.safeParse(m).success).toBe(true);
  });
});
