/**
 * One upstream's state in the pool: its live connection or the start under way, the start
 * failures and backoff, the last tools seen, and its call slots (at most `maxConcurrentCalls`
 * running, a bounded queue waiting). What agent_config_status shows of it is its snapshot.
 */
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { ToolError } from "../core/errors.ts";
import type { ServerConfig } from "./manifest.ts";
import { type Connection, remaining } from "./upstream-connection.ts";

/** Calls waiting for a free slot of one upstream before new ones get `upstream_busy`. */
export const MAX_QUEUED_CALLS = 64;

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

export class Upstream {
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
  private readonly waiters: Array<{ grant: () => void; fail: (e: ToolError) => void }> = [];
  idleTimer: Timer | undefined;
  starts = 0;
  /** The last tool list seen, kept after an idle shutdown so dynamic tools do not vanish. */
  lastTools: Tool[] | undefined;

  /** Takes a call slot, waiting for one until `deadline` (the message names `callTimeoutS`). */
  acquire(server: ServerConfig, deadline: number, signal: AbortSignal, callTimeoutS: number): Promise<void> {
    if (this.active < server.maxConcurrentCalls) {
      this.active++;
      return Promise.resolve();
    }
    if (this.waiters.length >= MAX_QUEUED_CALLS) {
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
          this.active++;
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
            new ToolError("upstream_timeout", `no call slot of ${server.name} became free within ${callTimeoutS} s`),
          ),
        remaining(deadline),
      );
      const onAbort = () => waiter.fail(new ToolError("cancelled", "the call was cancelled"));
      signal.addEventListener("abort", onAbort, { once: true });
      const cleanup = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
      };
      this.waiters.push(waiter);
    });
  }

  /** Gives a call slot back; the first waiter gets it. */
  release(): void {
    this.active--;
    this.waiters[0]?.grant();
  }

  /** Fails every call waiting for a slot (shutdown), each with an error of its own. */
  failWaiters(error: () => ToolError): void {
    for (const w of [...this.waiters]) w.fail(error());
  }
}

/** What agent_config_status shows of an upstream (undefined: never used). */
export function snapshotOf(u: Upstream | undefined): UpstreamSnapshot {
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
