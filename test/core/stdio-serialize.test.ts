import { describe, expect, test } from "bun:test";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { serializeMessage, serializePieces } from "../../src/core/mcp-stdio-transport.ts";

describe("stdio reply serialization", () => {
  test("is byte for byte JSON.stringify, with a large string shared by the text block and structured content", () => {
    const line = 'const s = "quote\\" tab\t ctl\u0001 é 😀 sep\u2028 lone\ud800"; // text\n';
    const big = line.repeat(Math.ceil(300_000 / line.length));
    const other = `${big}x`;
    const messages = [
      {
        jsonrpc: "2.0",
        id: 7,
        result: {
          content: [{ type: "text", text: big }],
          structuredContent: { kind: "file", path: "a.ts", content: big, n: 1, list: [big, "small", null] },
        },
      },
      {
        jsonrpc: "2.0",
        id: 8,
        result: { content: [{ type: "text", text: big }], structuredContent: { content: other, again: big } },
      },
      {
        jsonrpc: "2.0",
        id: 9,
        result: { content: [{ type: "text", text: "small" }], structuredContent: { content: big } },
      },
      { jsonrpc: "2.0", id: 10, result: { content: [{ type: "image", data: "AAAA", mimeType: "image/png" }] } },
      { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: 1, progress: 2, message: big } },
    ] as unknown as JSONRPCMessage[];
    for (const m of messages) expect(serializeMessage(m)).toBe(JSON.stringify(m));
    // Written as pieces (large strings as their encoded JSON, kept between replies), twice over so
    // that the second pass takes the kept bytes: the same bytes as the whole message.
    for (let pass = 0; pass < 2; pass++) {
      for (const m of messages) {
        const pieces = serializePieces(m);
        expect(
          Buffer.concat(pieces.map((p) => (typeof p === "string" ? Buffer.from(p) : p))).equals(
            Buffer.from(JSON.stringify(m)),
          ),
        ).toBe(true);
      }
    }
    expect(serializePieces(messages[0]!).length).toBeGreaterThan(1);
  });
});
