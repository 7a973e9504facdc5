import { z } from "zod";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import type { ManagedAttempt, ManagedRunner } from "../exec/jobs/managed.ts";
import type { SessionRecord, SessionStore } from "../sessions/store.ts";
import { copyBetween, type CopyOutcome, type CopyProgress, normalizeChunkSize } from "./copy.ts";
import type { TransferEndpoint } from "./endpoint.ts";
import type { GatewayConfig } from "./gateway/copy.ts";
import { LocalTransferEndpoint } from "./local-endpoint.ts";

/**
 * `session_copy` between two sessions, independent of the tool layer: endpoint binding (local
 * sessions here; remote ones through `remote`, the worker channel's resolver), the output shape, and
 * the runner of the `session-copy` managed job with its pinned endpoints.
 */

export const MANAGED_TYPE = "session-copy";

/** A session as a copy pins it: a retry fails if the binding changed; the workdir stays as it was. */
export const PinnedSide = z.object({
  session_id: z.string(),
  target: z.enum(["local", "remote"]),
  workdir: z.string(),
  machine: z.string().nullable(),
  worker_session_id: z.string().nullable(),
  path: z.string(),
});
export type PinnedSide = z.infer<typeof PinnedSide>;

export const CopyPayload = z.object({
  src_session_id: z.string(),
  dst_session_id: z.string(),
  src: PinnedSide,
  dst: PinnedSide,
  kind: z.enum(["auto", "file", "dir"]),
  overwrite: z.boolean(),
  chunk_size: z.number().int().positive(),
});
export type CopyPayload = z.infer<typeof CopyPayload>;

/** Serves remote sessions over the worker channel: the endpoint of a pinned remote side. */
export type RemoteTransferResolver = (side: PinnedSide, signal: AbortSignal) => TransferEndpoint;

export interface SessionCopyDeps {
  settings: Settings;
  workspaceRoot: string;
  /** Canonical private state dir. */
  stateDir: string;
  sessions: SessionStore;
  pathLock: <T>(paths: string[], fn: () => Promise<T> | T) => Promise<T>;
  /** Set by the app when remote workers are on (src/remote/transfer-endpoint.ts); undefined otherwise. */
  remote: RemoteTransferResolver | undefined;
  /** The controller gateway when http_stream is possible here (HTTP listener, base_url, setting on). */
  gateway?: () => GatewayConfig | undefined;
}

export function pin(rec: SessionRecord, path: string): PinnedSide {
  return {
    session_id: rec.session_id,
    target: rec.target,
    workdir: rec.workdir,
    machine: rec.machine,
    worker_session_id: rec.worker_session_id,
    path,
  };
}

/** The endpoint of one side; a remote side without the worker channel fails with a stable code. */
export function endpointFor(deps: SessionCopyDeps, side: PinnedSide, signal: AbortSignal): TransferEndpoint {
  if (side.target === "remote") {
    if (!deps.settings.remote_enabled)
      throw new ToolError("remote_disabled", "remote workers are disabled on this server (remote_enabled=false)");
    if (!deps.remote)
      throw new ToolError("remote_machine_not_found", `remote machine is not connected: ${side.machine ?? "?"}`, {
        machine: side.machine,
      });
    return deps.remote(side, signal);
  }
  const { settings } = deps;
  return new LocalTransferEndpoint({
    policy: {
      root: deps.workspaceRoot,
      workdir: side.workdir,
      stateDir: deps.stateDir,
      denylist: settings.allow_full_control ? [] : settings.path_denylist,
    },
    stateDir: deps.stateDir,
    limits: {
      maxEntries: settings.max_transfer_archive_entries,
      maxUnpackedBytes: settings.max_transfer_unpacked_bytes,
    },
    pathLock: deps.pathLock,
    signal,
  });
}

type Route =
  | "local_to_local"
  | "local_to_remote"
  | "remote_to_local"
  | "remote_to_remote_same_machine"
  | "remote_to_remote_different_machines";

export function relation(
  src: PinnedSide,
  dst: PinnedSide,
): { route: Route; same_session: boolean; same_target: boolean; same_machine: boolean } {
  const sameMachine = src.target === dst.target && src.machine === dst.machine;
  const route: Route =
    src.target === "local"
      ? dst.target === "local"
        ? "local_to_local"
        : "local_to_remote"
      : dst.target === "local"
        ? "remote_to_local"
        : sameMachine
          ? "remote_to_remote_same_machine"
          : "remote_to_remote_different_machines";
  return {
    route,
    same_session: src.session_id === dst.session_id,
    same_target: src.target === dst.target,
    same_machine: sameMachine,
  };
}

function side(p: PinnedSide, resolved: string | null) {
  return {
    session_id: p.session_id,
    target: p.target,
    machine: p.machine,
    workdir: p.workdir,
    path: p.path,
    resolved_path: resolved,
  };
}

/** Runs one copy and shapes the SessionCopyOutput. */
export async function runCopy(
  deps: SessionCopyDeps,
  payload: CopyPayload,
  opts: { resumeKey: string | null; signal: AbortSignal; progress?: (p: CopyProgress) => void },
) {
  const src = endpointFor(deps, payload.src, opts.signal);
  const dst = endpointFor(deps, payload.dst, opts.signal);
  const out: CopyOutcome = await copyBetween({
    src: { endpoint: src, path: payload.src.path, workdir: payload.src.workdir, sessionId: payload.src.session_id },
    dst: { endpoint: dst, path: payload.dst.path, workdir: payload.dst.workdir, sessionId: payload.dst.session_id },
    gateway: deps.gateway?.(),
    kind: payload.kind,
    overwrite: payload.overwrite,
    chunkSize: normalizeChunkSize(payload.chunk_size),
    resumeKey: opts.resumeKey,
    signal: opts.signal,
    progress: opts.progress,
  });
  const { source_resolved, destination_resolved, ...rest } = out;
  return {
    ...rest,
    source: side(payload.src, source_resolved),
    destination: side(payload.dst, destination_resolved),
    relation: relation(payload.src, payload.dst),
  };
}

/** A side of a background copy must still be the session it was: same target, machine, worker session. */
function checkBinding(deps: SessionCopyDeps, pinned: PinnedSide): void {
  let rec: SessionRecord;
  try {
    rec = deps.sessions.require(pinned.session_id);
  } catch {
    throw new ToolError("session_not_found", `session of the copy no longer exists: ${pinned.session_id}`, {
      session_id: pinned.session_id,
    });
  }
  if (
    rec.target !== pinned.target ||
    rec.machine !== pinned.machine ||
    rec.worker_session_id !== pinned.worker_session_id
  ) {
    throw new ToolError(
      "session_binding_changed",
      `session ${pinned.session_id} is no longer bound to the endpoint the copy was started with`,
      { session_id: pinned.session_id },
    );
  }
}

/** The `session-copy` managed job: resume key = job id, progress as the spec lists it. */
export function sessionCopyRunner(deps: SessionCopyDeps): ManagedRunner {
  return async (a: ManagedAttempt) => {
    const payload = CopyPayload.parse(a.payload);
    checkBinding(deps, payload.src);
    checkBinding(deps, payload.dst);
    const result = await runCopy(deps, payload, {
      resumeKey: a.job_id,
      signal: a.signal,
      progress: (p) => a.progress({ ...p }),
    });
    return result as unknown as Record<string, unknown>;
  };
}
