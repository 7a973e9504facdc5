/**
 * Making one connection to an upstream MCP server and closing it: the transport for its type (stdio
 * under lsm-runner, Streamable HTTP, SSE, with resolved headers and OAuth), the SDK client's start
 * within its budget (initialize and the first tools/list), the tool list, and the idle ping.
 * Which connection an upstream uses, and when, is the pool's business (pool.ts).
 */
import { type OAuthClientProvider, UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { ErrorCode, McpError, type Tool, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { VERSION } from "../core/version.ts";
import { limitResponse } from "./http-limits.ts";
import type { ServerConfig } from "./manifest.ts";
import type { FetchLike } from "./refresh-gate.ts";
import { ContainedStdioTransport } from "./stdio-transport.ts";

const PING_EVERY_MS = 30_000;

/** What the pool needs from the bridge: secrets resolved at the moment they are used. */
export interface UpstreamResolver {
  /** Environment for a stdio upstream, secrets included; throws `missing_secret`. */
  env(server: ServerConfig): Record<string, string>;
  /** Headers for one HTTP request to an upstream, secrets included; throws `missing_secret`. */
  headers(server: ServerConfig): Record<string, string>;
  /** A key that changes whenever the server's configuration or the secrets it uses change. */
  fingerprint(server: ServerConfig): string;
  /** The OAuth callbacks of an `auth.mode: "oauth"` server; throws `upstream_auth_required` without tokens. */
  authProvider(server: ServerConfig): OAuthClientProvider | undefined;
  /** Scrubs every configured secret out of a text (errors, stderr). */
  redact(text: string): string;
  runner(): Promise<string>;
  /** The fetch of an OAuth upstream: makes token refreshes single-flight (src/bridge/refresh-gate.ts). */
  oauthFetch(server: ServerConfig, base: FetchLike): FetchLike;
}

export interface Connection {
  client: Client;
  transport: Transport;
  pid: number | undefined;
  tools: Tool[];
  fingerprint: string;
  active: number;
  stale: boolean;
  closed: boolean;
  stderr: () => string;
  /** Why a stdio upstream's transport ended, when it was not our own close. */
  failure: () => string | undefined;
  ping?: Timer;
}

/** What making a connection needs, and how it tells the pool about the connection later on. */
export interface ConnectionContext {
  settings: Settings;
  resolver: UpstreamResolver;
  /** The client closed (the upstream went away, or we closed it); `conn.closed` is already set. */
  closed(conn: Connection): void;
  /** The upstream announced a changed tool list, now in `conn.tools`. */
  toolsRefreshed(conn: Connection): void;
}

/** Milliseconds left until `deadline`, at least 1. */
export function remaining(deadline: number): number {
  return Math.max(1, deadline - Date.now());
}

/** The end of a stdio upstream's stderr, redacted, as a suffix for an error message. */
export function stderrHint(conn: Connection | undefined, resolver: UpstreamResolver): string {
  const tail = conn?.stderr().trim();
  if (!tail) return "";
  return `; its stderr ends with: ${resolver.redact(tail.slice(-1000))}`;
}

/** Starts the server's transport and client; the whole start must finish by `deadline`. */
export async function openConnection(
  ctx: ConnectionContext,
  server: ServerConfig,
  fingerprint: string,
  deadline: number,
): Promise<Connection> {
  const { settings, resolver } = ctx;
  const transport = await transportFor(ctx, server);
  const client = new Client({ name: "local-shell-mcp-agent-bridge", version: VERSION }, { capabilities: {} });
  const stdio = transport instanceof ContainedStdioTransport ? transport : undefined;
  const conn: Connection = {
    client,
    transport,
    pid: undefined,
    tools: [],
    fingerprint,
    active: 0,
    stale: false,
    closed: false,
    stderr: () => stdio?.stderr() ?? "",
    failure: () => stdio?.failure,
  };
  client.onclose = () => {
    conn.closed = true;
    clearInterval(conn.ping);
    ctx.closed(conn);
  };
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    try {
      conn.tools = await listTools(client, Date.now() + settings.agent_mcp_probe_timeout_s * 1000);
      ctx.toolsRefreshed(conn);
    } catch (e) {
      log.warn(`agent bridge: refreshing the tools of ${server.name} failed: ${resolver.redact((e as Error).message)}`);
    }
  });
  const probe = settings.agent_mcp_probe_timeout_s;
  const budget = settings.agent_mcp_start_timeout_s;
  try {
    const signal = AbortSignal.timeout(remaining(deadline));
    await client.connect(transport, { timeout: remaining(deadline), signal });
    conn.pid = stdio?.pid;
    conn.tools = await listTools(client, deadline);
  } catch (e) {
    await client.close().catch(() => undefined);
    if (e instanceof ToolError) throw e;
    if (e instanceof UnauthorizedError)
      throw new ToolError(
        "upstream_auth_required",
        `${server.name} refused our credentials; run: local-shell-mcp mcp auth ${server.name}`,
      );
    const timedOut =
      (e instanceof McpError && e.code === ErrorCode.RequestTimeout) ||
      (e as Error)?.name === "TimeoutError" ||
      Date.now() >= deadline;
    const why = timedOut
      ? `did not complete its start (initialize and tools/list) within ${budget} s`
      : `failed during start-up: ${resolver.redact((e as Error)?.message ?? String(e)).slice(0, 1000)}`;
    throw new ToolError("upstream_unavailable", `${server.name} ${why}${stderrHint(conn, resolver)}`);
  }
  conn.ping = setInterval(() => {
    if (conn.active > 0 || conn.closed) return;
    client.ping({ timeout: probe * 1000 }).catch(() => {
      log.warn(`agent bridge: ${server.name} did not answer ping; closing it`);
      void closeConnection(conn);
    });
  }, PING_EVERY_MS);
  conn.ping.unref();
  return conn;
}

async function listTools(client: Client, deadline: number): Promise<Tool[]> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 100; page++) {
    const r = await client.listTools(cursor ? { cursor } : {}, { timeout: remaining(deadline) });
    tools.push(...r.tools);
    cursor = r.nextCursor;
    if (!cursor) break;
  }
  return tools;
}

async function transportFor({ settings, resolver }: ConnectionContext, server: ServerConfig): Promise<Transport> {
  if (server.type === "stdio") {
    return new ContainedStdioTransport({
      runner: await resolver.runner(),
      command: server.command ?? "",
      args: server.args,
      env: resolver.env(server),
      cwd: settings.workspace_root,
    });
  }
  // Fails early with missing_secret; later requests resolve their headers again.
  resolver.headers(server);
  const plainFetch: FetchLike = (url, init) => {
    const headers = new Headers(init?.headers);
    for (const [k, v] of Object.entries(resolver.headers(server))) headers.set(k, v);
    return fetch(url, { ...init, headers, redirect: "error" }).then((r) => limitResponse(r));
  };
  const url = new URL(server.url ?? "");
  const authProvider = resolver.authProvider(server);
  const fetchWithSecrets = authProvider ? resolver.oauthFetch(server, plainFetch) : plainFetch;
  const options = { fetch: fetchWithSecrets, ...(authProvider ? { authProvider } : {}) };
  return server.type === "sse" ? new SSEClientTransport(url, options) : new StreamableHTTPClientTransport(url, options);
}

/** Closes a connection: ends a Streamable HTTP session politely, then the client. */
export async function closeConnection(conn: Connection): Promise<void> {
  clearInterval(conn.ping);
  conn.closed = true;
  if (conn.transport instanceof StreamableHTTPClientTransport)
    await conn.transport.terminateSession().catch(() => undefined);
  await conn.client.close().catch(() => undefined);
}
