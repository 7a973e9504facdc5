/**
 * Background single-file transfers with rsync over the session's mux: one TransferManager per
 * session starts downloads (download.ts) and uploads (upload.ts) as tasks, holds their records
 * (operation.ts) for status and list, and cancels them. A destination is reserved across all
 * sessions while a transfer to it runs. Cancellation keeps the partial for a later resume.
 */
import { randomBytes } from "node:crypto";
import { posix } from "node:path";
import { ToolError, toToolError } from "../../core/errors.ts";
import { log } from "../../core/log.ts";
import type { Remote } from "../channel.ts";
import type { Target } from "../master.ts";
import { checkRemotePath, MAX_NAME_BYTES } from "../ops.ts";
import { stopGroup } from "../proc.ts";
import { sweepRemotePartials } from "../remote-partials.ts";
import type { SshSettings } from "../settings.ts";
import { download } from "./download.ts";
import { cacheKey } from "./keys.ts";
import { FINAL, iso, newOp, type Op, type TransferData, type TransferState } from "./operation.ts";
import type { TransferContext } from "./rsync-run.ts";
import { upload } from "./upload.ts";

export type { TransferData, TransferState } from "./operation.ts";

const RSYNC_STOP_GRACE_MS = 5000;
const RETENTION_MS = 3600 * 1000;

/** Destinations claimed by an active transfer, across all sessions. */
const reservations = new Set<string>();

export class TransferManager {
  private readonly ops = new Map<string, Op>();
  private closed = false;

  constructor(
    private readonly session: Remote & { readonly target: Target },
    private readonly settings: SshSettings,
  ) {}

  /** What a download or an upload of this session runs against. */
  private get context(): TransferContext {
    return { session: this.session, settings: this.settings };
  }

  activeCount(): number {
    let n = 0;
    for (const op of this.ops.values()) if (!FINAL.has(op.data.state)) n++;
    return n;
  }

  private prune(): void {
    const now = Date.now();
    for (const [id, op] of this.ops)
      if (op.finishedMs !== null && now - op.finishedMs > RETENTION_MS) this.ops.delete(id);
  }

  private register(
    direction: "download" | "upload",
    reservation: string,
    local: string,
    remote: string,
    overwrite: boolean,
  ): Op {
    if (this.closed) throw new ToolError("transfer_manager_closed", "the session's transfers are closed");
    if (this.activeCount() >= this.settings.maxTransfers)
      throw new ToolError(
        "transfer_limit_reached",
        `at most ${this.settings.maxTransfers} transfers may run per session`,
      );
    if (reservations.has(reservation))
      throw new ToolError("transfer_conflict", "another active transfer already targets this destination");
    reservations.add(reservation);
    let id = randomBytes(16).toString("hex");
    while (this.ops.has(id)) id = randomBytes(16).toString("hex");
    const op = newOp(id, direction, reservation, local, remote, overwrite);
    this.ops.set(id, op);
    return op;
  }

  async startDownload(remote: string, local: string, overwrite: boolean): Promise<TransferData> {
    this.prune();
    checkRemotePath(remote);
    await this.session.master.ensureReady();
    const dest = this.settings.localRoot.destination(local, overwrite);
    const op = this.register("download", `download\0${dest.display}`, dest.display, remote, overwrite);
    op.task = this.run(op, () => download(this.context, op, remote, local, overwrite));
    return this.view(op);
  }

  async startUpload(local: string, remote: string, overwrite: boolean): Promise<TransferData> {
    this.prune();
    if (remote.includes("\0") || remote.endsWith("/") || [".", ".."].includes(posix.basename(remote))) {
      throw new ToolError("invalid_remote_path", "remote destination must name a file");
    }
    checkRemotePath(remote);
    // the upload partial's name adds `.` + 32 hex + `.lsm-partial` to the final component
    if (Buffer.byteLength(posix.basename(remote)) > MAX_NAME_BYTES - 46) {
      throw new ToolError(
        "invalid_remote_path",
        `the remote file name must be at most ${MAX_NAME_BYTES - 46} bytes (room for its transfer partial's name)`,
      );
    }
    await this.session.master.ensureReady();
    const src = this.settings.localRoot.source(local);
    // one operation per destination however it is spelled (`a//b`, `./a`): the key is the normalised path
    const op = this.register(
      "upload",
      `upload\0${cacheKey(this.session.target)}\0${posix.normalize(remote)}`,
      src.display,
      remote,
      overwrite,
    );
    op.task = this.run(op, () => upload(this.context, op, src.abs, src.display, remote, overwrite));
    return this.view(op);
  }

  private async run(op: Op, body: () => Promise<void>): Promise<void> {
    await Promise.resolve();
    op.data.state = "running";
    op.data.started_at = iso();
    op.startedMs = Date.now();
    try {
      await body();
      op.data.state = "completed";
    } catch (e) {
      if (op.abort.signal.aborted) op.data.state = "cancelled";
      else {
        const err =
          e instanceof ToolError ? e : new ToolError("transfer_internal_error", "the transfer failed internally");
        if (!(e instanceof ToolError))
          log.warn(`transfer ${op.data.operation_id} failed: ${(e as Error)?.name ?? "error"}`);
        op.data.state = "failed";
        op.data.error = { code: err.code, message: err.message };
      }
    } finally {
      op.data.finished_at = iso();
      op.finishedMs = Date.now();
      op.data.eta_s = null;
      reservations.delete(op.reservation);
    }
  }

  /** Sweeps this target's stale recorded upload partials (see ../remote-partials.ts). */
  sweepRemote(): Promise<number> {
    return sweepRemotePartials(this.session, this.settings.localRoot, cacheKey(this.session.target));
  }

  private view(op: Op): TransferData {
    return { ...op.data };
  }

  private find(id: string): Op {
    this.prune();
    const op = this.ops.get(id);
    if (!op) throw new ToolError("transfer_not_found", "no transfer with that id in this session");
    return op;
  }

  status(id: string): TransferData {
    return this.view(this.find(id));
  }

  list(state?: TransferState): TransferData[] {
    this.prune();
    return [...this.ops.values()].filter((o) => !state || o.data.state === state).map((o) => this.view(o));
  }

  async cancel(id: string): Promise<TransferData> {
    const op = this.find(id);
    if (FINAL.has(op.data.state)) return this.view(op);
    op.abort.abort();
    if (op.proc) await stopGroup(op.proc, RSYNC_STOP_GRACE_MS);
    await op.task?.catch(() => undefined);
    return this.view(op);
  }

  /** Cancels every active transfer (partials are kept) and refuses new ones. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      [...this.ops.values()]
        .filter((o) => !FINAL.has(o.data.state))
        .map((o) => this.cancel(o.data.operation_id).catch((e) => toToolError(e))),
    );
  }
}
