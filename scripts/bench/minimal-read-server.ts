/**
 * The floor for `read`: a bare MCP SDK stdio server with one tool that reads the file and returns
 * it in the result our `read` sent (the same text block and structured content, taken from a reply
 * of our server), through the SDK's own transport. What our read costs beyond this is ours.
 * Usage (compiled and spawned by read-floor.ts): minimal-read-server <template.json>
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, type CallToolResult, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";

const template = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as { file: string; result: CallToolResult };
const server = new Server({ name: "minimal-read", version: "0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, () => ({
  tools: [{ name: "read", inputSchema: { type: "object" } }],
}));
server.setRequestHandler(CallToolRequestSchema, () => {
  // Read and decode the file each call, as a real server would; the reply is the template's.
  const content = readFileSync(template.file, "utf8");
  if (content.length === 0) throw new Error("empty file");
  return { content: template.result.content, structuredContent: template.result.structuredContent };
});
await server.connect(new StdioServerTransport());
