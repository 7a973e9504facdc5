import type { JSONRPCRequest } from "@modelcontextprotocol/sdk/types.js";
import { mcpStdin } from "../core/stdin.ts";
import type { App } from "./app.ts";
import { onShutdown, shutdown } from "./lifecycle.ts";
import { createMcpServer } from "./mcp.ts";
import { BoundedStdioTransport } from "../core/mcp-stdio-transport.ts";

/**
 * Serves MCP over stdin/stdout; the client closing stdin ends the server. One message (line) may
 * be as large as an HTTP request body (`max_http_request_bytes`); a larger one is answered with an
 * error and skipped.
 */
export async function serveStdio(app: App): Promise<void> {
  const server = createMcpServer(app, "stdio");
  const stdin = mcpStdin();
  const limit = app.services.settings.max_http_request_bytes;
  const transport = new BoundedStdioTransport(limit, "max_http_request_bytes", stdin);
  onShutdown(() => server.close());
  stdin.on("end", () => void shutdown("stdin closed"));
  stdin.on("close", () => void shutdown("stdin closed"));
  await server.connect(transport);
  // A request goes straight to the server's dispatch (the SDK's own message routing runs three
  // schemas on it first to tell a request from a response). Where a later SDK has no such method,
  // every message keeps the SDK's path.
  const dispatch = (server as unknown as { _onrequest?: (request: JSONRPCRequest) => void })._onrequest;
  if (typeof dispatch === "function") transport.onrequest = (request) => dispatch.call(server, request);
}
