import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { App } from "./app.ts";
import { onShutdown, shutdown } from "./lifecycle.ts";
import { createMcpServer } from "./mcp.ts";

/** Serves MCP over stdin/stdout; the client closing stdin ends the server. */
export async function serveStdio(app: App): Promise<void> {
  const server = createMcpServer(app, "stdio");
  const transport = new StdioServerTransport();
  onShutdown(() => server.close());
  process.stdin.on("end", () => void shutdown("stdin closed"));
  process.stdin.on("close", () => void shutdown("stdin closed"));
  await server.connect(transport);
}
