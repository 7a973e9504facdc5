/**
 * What a worker does for its controller: named operations, called over the channel. `tool` runs a
 * registry tool (validated, audited with transport "worker"); other capabilities register their
 * own internal operations here (e.g. the transfer RPCs), which are never listed as MCP tools.
 */
import { ToolError } from "../core/errors.ts";
import type { App } from "../server/app.ts";
import type { Settings } from "../config/schema.ts";

/** The worker process's own services and identity, handed to every operation. */
export interface WorkerRuntime {
  app: App;
  settings: Settings;
  profileId: string;
  /** The enrolled workdir (the worker's workspace_root). */
  workdir: string;
}

export interface WorkerOperationContext {
  runtime: WorkerRuntime;
  /** Aborted by the controller's `cancel`, the call's deadline, or a worker shutdown. */
  signal: AbortSignal;
  callId: string;
  /** Raw bytes that arrived with the call (binary frame), if any. */
  body?: Uint8Array;
  /**
   * The worker token this channel authenticated with: the gateway binds a transfer capability to
   * the worker that presents it, so gateway requests carry it too (never anything else).
   */
  credential?: string;
}

export interface WorkerOperationResult {
  /** JSON-able result data. */
  data: unknown;
  /** Raw bytes to return beside it in one binary frame (no base64). */
  body?: Uint8Array;
}

export type WorkerOperation = (ctx: WorkerOperationContext, args: unknown) => Promise<WorkerOperationResult>;

const operations = new Map<string, WorkerOperation>();
const capabilities = new Set<string>(["shell", "persistent_shell", "files", "search"]);

/**
 * Adds an internal operation. `capability` (e.g. "http-transfer-v1") is advertised to the
 * controller at enrollment and on every hello.
 */
export function registerWorkerOperation(
  name: string,
  handler: WorkerOperation,
  options: { capability?: string } = {},
): void {
  if (!/^[a-z][a-z0-9_]{0,63}$/.test(name)) throw new Error(`invalid worker operation name ${name}`);
  if (operations.has(name)) throw new Error(`worker operation ${name} is already registered`);
  operations.set(name, handler);
  if (options.capability) capabilities.add(options.capability);
}

export function workerOperation(name: string): WorkerOperation | undefined {
  return operations.get(name);
}

export function workerCapabilities(): string[] {
  return [...capabilities].sort();
}

/** `tool {name, args}`: one registry call, exactly as a local client would make it. */
registerWorkerOperation("tool", async (ctx, raw) => {
  const args = raw as { name?: unknown; args?: unknown } | null;
  if (!args || typeof args.name !== "string") throw new ToolError("invalid_arguments", "tool needs a name");
  const call = {
    ...ctx.runtime.app.context({ signal: ctx.signal, transport: "worker" }),
    media: [] as NonNullable<ReturnType<App["context"]>["media"]>,
  };
  const outcome = await ctx.runtime.app.registry.call(call, args.name, args.args ?? {});
  if (!outcome.ok) throw outcome.error;
  return { data: { structured: outcome.structured, ...(call.media.length > 0 ? { media: call.media } : {}) } };
});

/** `ping`: answers at once and echoes any bytes sent, to measure the link's round trip and throughput. */
registerWorkerOperation("ping", async (ctx) => ({
  data: { pong: true, bytes: ctx.body?.byteLength ?? 0 },
  ...(ctx.body ? { body: ctx.body } : {}),
}));
