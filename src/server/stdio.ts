import type { App } from "./app.ts";
import { onShutdown, shutdown } from "./lifecycle.ts";
import { createMcpServer } from "./mcp.ts";
import { BoundedStdioTransport } from "./stdio-transport.ts";

/**
 * Serves MCP over stdin/stdout; the client closing stdin ends the server. One message (line) may
 * be as large as an HTTP request body (`max_http_request_bytes`); a larger one is answered with an
 * error and skipped.
 */
export async function serveStdio(app: App): Promise<void> {
  const server = createMcpServer(app, "stdio");
  const transport = new BoundedStdioTransport(app.services.settings.max_http_request_bytes, "max_http_request_bytes");
  onShutdown(() => server.close());
  process.stdin.on("end", () => void shutdown("stdin closed"));
  process.stdin.on("close", () => void shutdown("stdin closed"));
  await server.connect(transport);
}
