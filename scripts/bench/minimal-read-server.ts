/**
 * The floor for `read`: a bare MCP SDK stdio server with one tool that reads a file and returns it
 * in the result shape our `read` uses (the same text block and structured content, taken from a
 * template our server produced). What our read costs beyond this is ours to remove.
 * Usage (spawned by read-floor.ts): bun minimal-read-server.ts <template.json>
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";

const template = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as { file: string; text: string; structured: Record<string, unknown> };
const server = new Server({ name: "minimal-read", version: "0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: [{ name: "read", inputSchema: { type: "object" } }] }));
server.setRequestHandler(CallToolRequestSchema, () => {
  // Read the file each call, as a real server would, and return it in our shape.
  const content = readFileSync(template.file, "utf8");
  return { content: [{ type: "text", text: template.text.length >= content.length ? template.text : content }], structuredContent: template.structured };
});
await server.connect(new StdioServerTransport());
