import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { type CallToolResult, ErrorCode, McpError, type Tool } from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import type { JsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/types.js";
import type { Settings } from "../config/schema.ts";
import { type Backoff, backoffMs, retry, type RetryOptions } from "../core/backoff.ts";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import type { ServerConfig } from "./manifest.ts";
import { ContainedStdioTransport, UpstreamGoneError } from "./stdio-transport.ts";
import { snapshotOf, Upstream, type UpstreamSnapshot } from "./upstream.ts";
import {
  type Connection,
  closeConnection,
  openConnection,
  remaining,
  stderrHint,
  type UpstreamResolver,
} from "./upstream-connection.ts";

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
    return snapshotOf(this.upstreams.get(name));
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
    const callTimeoutS = this.settings.agent_mcp_call_timeout_s;
    await u.acquire(server, started + callTimeoutS * 1000, signal, callTimeoutS);
    // Waiting for a slot counts against the call timeout; starting the upstream has its own bound.
    const waited = Date.now() - started;
    try {
      return await retry(() => this.callOnce(server, tool, args, signal, waited), RESEND_ONCE);
    } finally {
      u.release();
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
        if (conn.stale && conn.active === 0) void closeConnection(conn);
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
      const hint = stderrHint(conn, this.resolver);
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

  private scheduleIdle(server: ServerConfig, u: Upstream): void {
    clearTimeout(u.idleTimer);
    if (server.idleTimeoutS === 0 || u.active > 0 || !u.conn) return;
    const conn = u.conn;
    u.idleTimer = setTimeout(() => {
      if (u.conn === conn && u.active === 0) {
        log.info(`agent bridge: stopping idle upstream ${server.name}`);
        u.conn = undefined;
        void closeConnection(conn);
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
      if (old.active === 0) void closeConnection(old);
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

  private connect(server: ServerConfig, fingerprint: string, deadline: number): Promise<Connection> {
    return openConnection(
      {
        settings: this.settings,
        resolver: this.resolver,
        closed: (conn) => {
          const u = this.upstreams.get(server.name);
          if (u?.conn === conn) u.conn = undefined;
        },
        toolsRefreshed: (conn) => {
          const u = this.upstreams.get(server.name);
          if (u?.conn === conn) u.lastTools = conn.tools;
          this.onToolsChanged?.();
        },
      },
      server,
      fingerprint,
      deadline,
    );
  }

  /** Stops every upstream (server shutdown). */
  async closeAll(): Promise<void> {
    this.closing = true;
    const conns = [...this.upstreams.values()].flatMap((u) => (u.conn ? [u.conn] : []));
    for (const u of this.upstreams.values()) {
      clearTimeout(u.idleTimer);
      u.failWaiters(() => new ToolError("upstream_unavailable", "the server is shutting down"));
    }
    await Promise.allSettled(conns.map((c) => closeConnection(c)));
  }
}
