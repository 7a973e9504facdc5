import { type OAuthClientProvider, UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  type CallToolResult,
  ErrorCode,
  McpError,
  type Tool,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import type { JsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/types.js";
import type { Settings } from "../config/schema.ts";
import { type Backoff, backoffMs, retry, type RetryOptions } from "../core/backoff.ts";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { VERSION } from "../core/version.ts";
import { limitResponse } from "./http-limits.ts";
import type { ServerConfig } from "./manifest.ts";
import type { FetchLike } from "./refresh-gate.ts";
import { ContainedStdioTransport, UpstreamGoneError } from "./stdio-transport.ts";

/** Calls waiting for a free slot of one upstream before new ones get `upstream_busy`. */
export const MAX_QUEUED_CALLS = 64;
/** After a failed start, calls wait before the next one: 250 ms doubling to 30 s. */
const START_BACKOFF: Backoff = { firstMs: 250, maxMs: 30_000 };
/**
 * A process that died between calls may not be noticed until the request cannot be written; that
 * request never arrived, so it is sent once more, at once, to a fresh process.
 */
const RESEND_ONCE: RetryOptions = {
  retries: 1,
  firstMs: 0,
  maxMs: 0,
  retryable: (e) => e instanceof UpstreamGoneError,
};
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

interface Connection {
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

class Upstream {
  conn: Connection | undefined;
  connecting: Promise<Connection> | undefined;
  /** The start in progress is a background warm-up (its failure is not a call's). */
  connectingInBackground = false;
  failures = 0;
  retryAt = 0;
  lastError: string | undefined;
  /** The most recent failure, kept after a later success, for agent_config_status. */
  lastFailure: { message: string; at: number } | undefined;
  active = 0;
  readonly waiters: Array<{ grant: () => void; fail: (e: ToolError) => void }> = [];
  idleTimer: Timer | undefined;
  starts = 0;
  /** The last tool list seen, kept after an idle shutdown so dynamic tools do not vanish. */
  lastTools: Tool[] | undefined;
}

export type UpstreamState = "not_started" | "starting" | "running" | "backing_off" | "stopped";

export interface UpstreamSnapshot {
  state: UpstreamState;
  running: boolean;
  pid: number | null;
  tool_count: number | null;
  error: string | null;
  last_error: string | null;
  last_error_at: string | null;
  starts: number;
}

function remaining(deadline: number): number {
  return Math.max(1, deadline - Date.now());
}

/**
 * Long-lived client connections to the manifest's upstream MCP servers: started on first use, each
 * start within its own `agent_mcp_start_timeout_s`, tool lists cached and refreshed on `list_changed`,
 * pinged when idle, closed after `idleTimeoutS`, restarted with backoff after failures, and each
 * limited to `maxConcurrentCalls` calls with a bounded queue.
 */
export class UpstreamPool {
  private readonly upstreams = new Map<string, Upstream>();
  private readonly validator = new AjvJsonSchemaValidator();
  private readonly validators = new WeakMap<object, JsonSchemaValidator<unknown>>();
  private closing = false;
  private readonly warmQueue: ServerConfig[] = [];
  private warming = false;
  /** Called when an upstream's tool list is first known or changes (dynamic tools listen). */
  onToolsChanged: (() => void) | undefined;

  constructor(
    private readonly settings: Settings,
    private readonly resolver: UpstreamResolver,
  ) {}

  private upstream(name: string): Upstream {
    let u = this.upstreams.get(name);
    if (!u) this.upstreams.set(name, (u = new Upstream()));
    return u;
  }

  snapshot(name: string): UpstreamSnapshot {
    const u = this.upstreams.get(name);
    const conn = u?.conn && !u.conn.closed ? u.conn : undefined;
    let state: UpstreamState = "not_started";
    if (conn) state = "running";
    else if (u?.connecting) state = "starting";
    else if (u && Date.now() < u.retryAt) state = "backing_off";
    else if (u && u.starts > 0) state = "stopped";
    return {
      state,
      running: conn !== undefined,
      pid: conn?.pid ?? null,
      tool_count: conn ? conn.tools.length : null,
      error: u?.lastError ?? null,
      last_error: u?.lastFailure?.message ?? null,
      last_error_at: u?.lastFailure ? new Date(u.lastFailure.at).toISOString() : null,
      starts: u?.starts ?? 0,
    };
  }

  /**
   * Starts enabled upstreams in the background so their tools can be listed as dynamic tools:
   * one after another, so they do not compete for a busy machine, and without backoff, so a
   * failed warm-up never makes the first real call fail fast. A real call starts its upstream
   * at once, whatever the queue.
   */
  warm(servers: ServerConfig[]): void {
    this.warmQueue.push(...servers);
    if (this.warming) return;
    this.warming = true;
    void (async () => {
      for (let s = this.warmQueue.shift(); s !== undefined; s = this.warmQueue.shift()) {
        if (this.closing) break;
        await this.ensure(s, Date.now() + this.startBudgetMs(), true).catch(() => undefined);
        this.scheduleIdle(s, this.upstream(s.name));
      }
      this.warming = false;
    })();
  }

  private startBudgetMs(): number {
    return this.settings.agent_mcp_start_timeout_s * 1000;
  }

  /** The last known tools of an upstream (running or stopped since), without starting anything. */
  cachedTools(name: string): Tool[] | undefined {
    return this.upstreams.get(name)?.lastTools;
  }

  /** The upstream's tools, starting it if needed. */
  async tools(server: ServerConfig): Promise<Tool[]> {
    const deadline = Date.now() + this.startBudgetMs();
    const conn = await this.ensure(server, deadline);
    this.scheduleIdle(server, this.upstream(server.name));
    return conn.tools;
  }

  /** Calls one upstream tool; waiting for a slot counts against the call timeout. */
  async call(
    server: ServerConfig,
    tool: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<CallToolResult> {
    const u = this.upstream(server.name);
    // The start has its own budget: calls queued behind a slow start do not spend their call
    // timeout on it (a busy machine can take seconds to start an upstream).
    await this.ensure(server, Date.now() + this.startBudgetMs());
    const started = Date.now();
    await this.acquire(server, u, started + this.settings.agent_mcp_call_timeout_s * 1000, signal);
    // Waiting for a slot counts against the call timeout; starting the upstream has its own bound.
    const waited = Date.now() - started;
    try {
      return await retry(() => this.callOnce(server, tool, args, signal, waited), RESEND_ONCE);
    } finally {
      this.release(u);
      this.scheduleIdle(server, u);
    }
  }

  private async callOnce(
    server: ServerConfig,
    tool: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
    waited: number,
  ): Promise<CallToolResult> {
    let conn: Connection | undefined;
    try {
      conn = await this.ensure(server, Date.now() + this.startBudgetMs());
      const deadline = Date.now() + this.settings.agent_mcp_call_timeout_s * 1000 - waited;
      conn.active++;
      const def = conn.tools.find((t) => t.name === tool);
      if (!def)
        throw new ToolError(
          "mcp_tool_not_found",
          `${server.name} has no tool named ${JSON.stringify(tool.slice(0, 200))}`,
        );
      this.validate(server, def, args);
      return (await conn.client.callTool({ name: tool, arguments: args }, undefined, {
        timeout: remaining(deadline),
        signal,
        maxTotalTimeout: remaining(deadline),
      })) as CallToolResult;
    } catch (e) {
      if (e instanceof UpstreamGoneError) {
        const u = this.upstream(server.name);
        if (u.conn === conn) u.conn = undefined;
        throw e;
      }
      throw this.callError(server, conn, e);
    } finally {
      if (conn) {
        conn.active--;
        if (conn.stale && conn.active === 0) void this.closeConnection(conn);
      }
    }
  }

  private validate(server: ServerConfig, def: Tool, args: Record<string, unknown>): void {
    let check = this.validators.get(def.inputSchema);
    if (!check) {
      try {
        check = this.validator.getValidator(def.inputSchema as never);
      } catch {
        throw new ToolError(
          "upstream_unavailable",
          `${server.name} advertises an input schema for ${def.name} that cannot be compiled`,
        );
      }
      this.validators.set(def.inputSchema, check);
    }
    const r = check(args);
    if (!r.valid)
      throw new ToolError(
        "upstream_arguments_invalid",
        `arguments do not match the input schema ` +
          `of ${server.name}/${def.name}: ${this.resolver.redact(r.errorMessage).slice(0, 2000)}`,
      );
  }

  private callError(server: ServerConfig, conn: Connection | undefined, e: unknown): ToolError {
    if (e instanceof ToolError) return e;
    if (e instanceof UnauthorizedError)
      return new ToolError(
        "upstream_auth_required",
        `${server.name} refused our credentials; run: local-shell-mcp mcp auth ${server.name}`,
      );
    if (e instanceof McpError && e.code === ErrorCode.RequestTimeout) {
      return new ToolError(
        "upstream_timeout",
        `${server.name} did not answer within ${this.settings.agent_mcp_call_timeout_s} s; the call was cancelled`,
      );
    }
    if ((e as Error)?.name === "AbortError" || (e instanceof McpError && /abort/i.test(e.message)))
      return new ToolError("cancelled", "the call was cancelled");
    if (conn?.closed || (e instanceof McpError && e.code === ErrorCode.ConnectionClosed)) {
      const why = conn?.failure();
      const reason = why ? `: ${why}` : "";
      const hint = this.stderrHint(conn);
      return new ToolError("upstream_unavailable", `${server.name} stopped during the call${reason}${hint}`);
    }
    // Not an error answer of the upstream but a broken transport (HTTP failure, lost session):
    // the next call starts over with a fresh connection.
    if (conn && !(e instanceof McpError)) {
      conn.stale = true;
      const u = this.upstreams.get(server.name);
      if (u?.conn === conn) u.conn = undefined;
    }
    const message = e instanceof Error ? e.message : String(e);
    return new ToolError(
      "upstream_error",
      `${server.name} returned an error: ${this.resolver.redact(message).slice(0, 2000)}`,
    );
  }

  private stderrHint(conn: Connection | undefined): string {
    const tail = conn?.stderr().trim();
    if (!tail) return "";
    return `; its stderr ends with: ${this.resolver.redact(tail.slice(-1000))}`;
  }

  private acquire(server: ServerConfig, u: Upstream, deadline: number, signal: AbortSignal): Promise<void> {
    if (u.active < server.maxConcurrentCalls) {
      u.active++;
      return Promise.resolve();
    }
    if (u.waiters.length >= MAX_QUEUED_CALLS) {
      return Promise.reject(
        new ToolError(
          "upstream_busy",
          `${server.name} already has ${server.maxConcurrentCalls} calls running and ${MAX_QUEUED_CALLS} ` +
            `waiting; try again later`,
        ),
      );
    }
    return new Promise<void>((resolve, reject) => {
      const waiter = {
        grant: () => {
          cleanup();
          u.active++;
          resolve();
        },
        fail: (e: ToolError) => {
          cleanup();
          reject(e);
        },
      };
      const timer = setTimeout(
        () =>
          waiter.fail(
            new ToolError(
              "upstream_timeout",
              `no call slot of ${server.name} became free within ${this.settings.agent_mcp_call_timeout_s} s`,
            ),
          ),
        remaining(deadline),
      );
      const onAbort = () => waiter.fail(new ToolError("cancelled", "the call was cancelled"));
      signal.addEventListener("abort", onAbort, { once: true });
      const cleanup = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        const i = u.waiters.indexOf(waiter);
        if (i >= 0) u.waiters.splice(i, 1);
      };
      u.waiters.push(waiter);
    });
  }

  private release(u: Upstream): void {
    u.active--;
    u.waiters[0]?.grant();
  }

  private scheduleIdle(server: ServerConfig, u: Upstream): void {
    clearTimeout(u.idleTimer);
    if (server.idleTimeoutS === 0 || u.active > 0 || !u.conn) return;
    const conn = u.conn;
    u.idleTimer = setTimeout(() => {
      if (u.conn === conn && u.active === 0) {
        log.info(`agent bridge: stopping idle upstream ${server.name}`);
        u.conn = undefined;
        void this.closeConnection(conn);
      }
    }, server.idleTimeoutS * 1000);
    u.idleTimer.unref();
  }

  /** A live connection for the server's current configuration, starting one if needed. */
  private async ensure(server: ServerConfig, deadline: number, background = false): Promise<Connection> {
    if (this.closing) throw new ToolError("upstream_unavailable", "the server is shutting down");
    const u = this.upstream(server.name);
    const fingerprint = this.resolver.fingerprint(server);
    const dead =
      u.conn && (u.conn.closed || (u.conn.transport instanceof ContainedStdioTransport && !u.conn.transport.alive()));
    if (u.conn && (dead || u.conn.fingerprint !== fingerprint)) {
      const old = u.conn;
      u.conn = undefined;
      // A changed configuration or secret restarts only this upstream, once its calls finish.
      old.stale = true;
      if (old.active === 0) void this.closeConnection(old);
    }
    if (u.conn) return u.conn;
    if (u.connecting && u.connectingInBackground && !background) {
      // A call that finds a warm-up under way waits for it, and if it failed starts on its own budget.
      return u.connecting.catch(() => this.ensure(server, Math.max(deadline, Date.now() + this.startBudgetMs())));
    }
    if (!u.connecting) {
      if (Date.now() < u.retryAt && !background) {
        const wait = ((u.retryAt - Date.now()) / 1000).toFixed(1);
        throw new ToolError(
          "upstream_unavailable",
          `${server.name} failed to start and is backing off (retry in ${wait} s): ${u.lastError ?? "unknown error"}`,
        );
      }
      u.connecting = this.connect(server, fingerprint, deadline).then(
        (conn) => {
          u.connecting = undefined;
          u.conn = conn;
          u.failures = 0;
          u.retryAt = 0;
          u.lastError = undefined;
          u.lastTools = conn.tools;
          this.onToolsChanged?.();
          return conn;
        },
        (e: unknown) => {
          u.connecting = undefined;
          const err =
            e instanceof ToolError
              ? e
              : new ToolError(
                  "upstream_unavailable",
                  `${server.name} could not be started: ${this.resolver.redact((e as Error)?.message ?? String(e))}`,
                );
          u.lastFailure = { message: err.message, at: Date.now() };
          // Only a failed start backs off; a missing secret or a corrupt store is fixed by the operator.
          // A failed warm-up does not: the first call that needs the upstream gets a start of its own.
          if (err.code === "upstream_unavailable" && !background) {
            u.failures++;
            u.retryAt = Date.now() + backoffMs(START_BACKOFF, u.failures - 1);
            u.lastError = err.message;
          }
          throw err;
        },
      );
      u.starts++;
      u.connectingInBackground = background;
    }
    return u.connecting;
  }

  private async connect(server: ServerConfig, fingerprint: string, deadline: number): Promise<Connection> {
    const transport = await this.transportFor(server);
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
      const u = this.upstreams.get(server.name);
      if (u?.conn === conn) u.conn = undefined;
    };
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      try {
        conn.tools = await this.listTools(client, Date.now() + this.settings.agent_mcp_probe_timeout_s * 1000);
        const u = this.upstreams.get(server.name);
        if (u?.conn === conn) u.lastTools = conn.tools;
        this.onToolsChanged?.();
      } catch (e) {
        log.warn(
          `agent bridge: refreshing the tools of ${server.name} failed: ${this.resolver.redact((e as Error).message)}`,
        );
      }
    });
    const probe = this.settings.agent_mcp_probe_timeout_s;
    const budget = this.settings.agent_mcp_start_timeout_s;
    try {
      const signal = AbortSignal.timeout(remaining(deadline));
      await client.connect(transport, { timeout: remaining(deadline), signal });
      conn.pid = stdio?.pid;
      conn.tools = await this.listTools(client, deadline);
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
        : `failed during start-up: ${this.resolver.redact((e as Error)?.message ?? String(e)).slice(0, 1000)}`;
      throw new ToolError("upstream_unavailable", `${server.name} ${why}${this.stderrHint(conn)}`);
    }
    conn.ping = setInterval(() => {
      if (conn.active > 0 || conn.closed) return;
      client.ping({ timeout: probe * 1000 }).catch(() => {
        log.warn(`agent bridge: ${server.name} did not answer ping; closing it`);
        void this.closeConnection(conn);
      });
    }, PING_EVERY_MS);
    conn.ping.unref();
    return conn;
  }

  private async listTools(client: Client, deadline: number): Promise<Tool[]> {
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

  private async transportFor(server: ServerConfig): Promise<Transport> {
    if (server.type === "stdio") {
      return new ContainedStdioTransport({
        runner: await this.resolver.runner(),
        command: server.command ?? "",
        args: server.args,
        env: this.resolver.env(server),
        cwd: this.settings.workspace_root,
      });
    }
    // Fails early with missing_secret; later requests resolve their headers again.
    this.resolver.headers(server);
    const plainFetch: FetchLike = (url, init) => {
      const headers = new Headers(init?.headers);
      for (const [k, v] of Object.entries(this.resolver.headers(server))) headers.set(k, v);
      return fetch(url, { ...init, headers, redirect: "error" }).then((r) => limitResponse(r));
    };
    const url = new URL(server.url ?? "");
    const authProvider = this.resolver.authProvider(server);
    const fetchWithSecrets = authProvider ? this.resolver.oauthFetch(server, plainFetch) : plainFetch;
    const options = { fetch: fetchWithSecrets, ...(authProvider ? { authProvider } : {}) };
    return server.type === "sse"
      ? new SSEClientTransport(url, options)
      : new StreamableHTTPClientTransport(url, options);
  }

  private async closeConnection(conn: Connection): Promise<void> {
    clearInterval(conn.ping);
    conn.closed = true;
    if (conn.transport instanceof StreamableHTTPClientTransport)
      await conn.transport.terminateSession().catch(() => undefined);
    await conn.client.close().catch(() => undefined);
  }

  /** Stops every upstream (server shutdown). */
  async closeAll(): Promise<void> {
    this.closing = true;
    const conns = [...this.upstreams.values()].flatMap((u) => (u.conn ? [u.conn] : []));
    for (const u of this.upstreams.values()) {
      clearTimeout(u.idleTimer);
      for (const w of [...u.waiters]) w.fail(new ToolError("upstream_unavailable", "the server is shutting down"));
    }
    await Promise.allSettled(conns.map((c) => this.closeConnection(c)));
  }
}
