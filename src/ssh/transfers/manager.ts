/**
 * Background single-file transfers with rsync over the session's mux. Partials are deterministic:
 * a download's lives in the local root's private partial directory (moved to the destination at
 * publication, re-checked after the move), an upload's beside the remote destination (same-directory
 * rename or link). Both sides are hashed before publication, and cancellation keeps the partial for a
 * later resume.
 */
import { createHash, randomBytes } from "node:crypto";
import { lstatSync, rmSync, statfsSync } from "node:fs";
import { dirname } from "node:path";
import { posix } from "node:path";
import type { Subprocess } from "bun";
import { ToolError, toToolError } from "../../core/errors.ts";
import { log } from "../../core/log.ts";
import { FollowingHasher, hashLocalFile } from "../hashing.ts";
import { destination, type Target } from "../master.ts";
import { checkRemotePath, MAX_NAME_BYTES, remoteHash, remoteScript, statPath } from "../ops.ts";
import { shq, stopGroup } from "../proc.ts";
import { rsyncFailure, rsyncRemote, runRsync } from "../rsync.ts";
import type { Remote } from "../channel.ts";
import type { SshSettings } from "../settings.ts";
import { sweepRemotePartials } from "../remote-partials.ts";

const RSYNC_STOP_GRACE_MS = 5000;
const RETENTION_MS = 3600 * 1000;

export type TransferState = "pending" | "running" | "verifying" | "completed" | "failed" | "cancelled";
const FINAL = new Set<TransferState>(["completed", "failed", "cancelled"]);

export interface TransferData {
  operation_id: string;
  direction: "download" | "upload";
  state: TransferState;
  local_path: string;
  remote_path: string;
  overwrite: boolean;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  bytes_transferred: number;
  total_bytes: number | null;
  resumed_from: number;
  rate_bytes_per_s: number | null;
  eta_s: number | null;
  sha256: string | null;
  exit_code: number | null;
  error: { code: string; message: string } | null;
}

interface Op {
  data: TransferData;
  finishedMs: number | null;
  reservation: string;
  abort: AbortController;
  proc: Subprocess | undefined;
  task: Promise<void> | undefined;
  startedMs: number;
}

/** Destinations claimed by an active transfer, across all sessions. */
const reservations = new Set<string>();

function iso(): string {
  return new Date().toISOString().replace("Z", "+00:00");
}

function cacheKey(t: Target): string {
  return t.mode === "alias" ? `alias:${t.alias}` : `direct:${t.user}@${t.host}:${t.port}`;
}

function token(fields: string[]): string {
  const h = createHash("sha256");
  for (const f of fields) h.update(`${f}\0`);
  return h.digest("hex").slice(0, 32);
}

export class TransferManager {
  private readonly ops = new Map<string, Op>();
  private closed = false;

  constructor(
    private readonly session: Remote & { readonly target: Target },
    private readonly settings: SshSettings,
  ) {}

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
    const op: Op = {
      data: {
        operation_id: id,
        direction,
        state: "pending",
        local_path: local,
        remote_path: remote,
        overwrite,
        created_at: iso(),
        started_at: null,
        finished_at: null,
        bytes_transferred: 0,
        total_bytes: null,
        resumed_from: 0,
        rate_bytes_per_s: null,
        eta_s: null,
        sha256: null,
        exit_code: null,
        error: null,
      },
      finishedMs: null,
      reservation,
      abort: new AbortController(),
      proc: undefined,
      task: undefined,
      startedMs: Date.now(),
    };
    this.ops.set(id, op);
    return op;
  }

  async startDownload(remote: string, local: string, overwrite: boolean): Promise<TransferData> {
    this.prune();
    checkRemotePath(remote);
    await this.session.master.ensureReady();
    const dest = this.settings.localRoot.destination(local, overwrite);
    const op = this.register("download", `download\0${dest.display}`, dest.display, remote, overwrite);
    op.task = this.run(op, () => this.download(op, remote, local, overwrite));
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
    op.task = this.run(op, () => this.upload(op, src.abs, src.display, remote, overwrite));
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

  private checkCancelled(op: Op): void {
    if (op.abort.signal.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
  }

  /** Runs rsync over the mux for `op`; resolves on success, throws a mapped error otherwise. */
  private async rsync(op: Op, src: string, dst: string, onProgress: (parsed: number) => void): Promise<void> {
    this.checkCancelled(op);
    const master = this.session.master;
    await master.ensureReady();
    const { code, noSpace } = await runRsync(
      {
        rsync: this.settings.bin.rsync,
        runner: this.settings.bin.runner,
        copyLinks: op.data.direction === "download",
        shell: [...master.transport(), ...destination(this.session.target).args],
        bwlimitKiB: this.settings.transferBwlimitKiB,
        src,
        dst,
      },
      (proc) => (op.proc = proc),
      onProgress,
    );
    op.proc = undefined;
    op.data.exit_code = code;
    this.checkCancelled(op);
    if (code === 0) return;
    await master.ensureReady(true);
    if (noSpace && op.data.direction === "download")
      throw new ToolError(
        "local_disk_full",
        "the local disk filled up during the download; the partial was kept for a resume",
      );
    if (noSpace)
      throw new ToolError(
        "insufficient_remote_space",
        "the remote disk filled up during the upload; the partial was kept for a resume",
      );
    throw rsyncFailure(code);
  }

  private progress(op: Op, done: number): void {
    op.data.bytes_transferred = done;
    const elapsed = (Date.now() - op.startedMs) / 1000;
    const moved = done - op.data.resumed_from;
    if (elapsed > 0.2 && moved > 0) {
      op.data.rate_bytes_per_s = Math.round(moved / elapsed);
      op.data.eta_s =
        op.data.total_bytes !== null ? Math.max(0, Math.round((op.data.total_bytes - done) / (moved / elapsed))) : null;
    }
  }

  private async download(op: Op, remote: string, local: string, overwrite: boolean): Promise<void> {
    const root = this.settings.localRoot;
    const st = await statPath(this.session, this.settings, remote, op.abort.signal);
    if (st.type !== "regular") throw new ToolError("invalid_remote_type", "remote source is not a regular file");
    op.data.total_bytes = st.size;
    const dest = root.destination(local, overwrite);
    const partial = root.partialFor(token(["download", cacheKey(this.session.target), remote, dest.display]));
    let have = 0;
    try {
      const pst = lstatSync(partial);
      // rsync appends in place: a partial hard-linked to another file would write into that file
      if (!pst.isFile() || pst.uid !== process.getuid!() || pst.nlink !== 1)
        throw new ToolError("invalid_transfer_partial", "the transfer partial is not a regular file we own");
      if (pst.size > st.size) rmSync(partial, { force: true });
      else have = pst.size;
    } catch (e) {
      if (e instanceof ToolError) throw e;
    }
    op.data.resumed_from = have;
    op.data.bytes_transferred = have;
    const fs = statfsSync(dirname(partial));
    if (fs.bavail * fs.bsize < st.size - have)
      throw new ToolError("insufficient_local_space", "not enough free local space for the download");
    root.rememberPartial(partial);
    const poll = setInterval(() => {
      try {
        this.progress(op, lstatSync(partial).size);
      } catch {
        // not created yet
      }
    }, 250);
    // Both SHA-256s run alongside rsync: the remote one over the source (rsync and sha256sum each
    // keep the file they opened, so a source replaced by rename gives the older version; see
    // docs/ssh.md for a source rewritten in place) and the
    // local one following the partial as rsync appends to it.
    const sideline = new AbortController();
    const hashSignal = AbortSignal.any([op.abort.signal, sideline.signal]);
    const remoteSum = remoteHash(this.session, remote, hashSignal);
    remoteSum.catch(() => undefined);
    const follower = new FollowingHasher(partial, hashSignal);
    let copied = false;
    try {
      await this.rsync(op, rsyncRemote(this.session.target, remote), partial, () => undefined);
      copied = true;
    } finally {
      clearInterval(poll);
      // a failed copy stops both hashes (the remote one is a channel of this session)
      if (!copied) sideline.abort();
    }
    this.progress(op, lstatSync(partial).size);
    op.data.state = "verifying";
    let localSum = (await follower.finish()) ?? (await hashLocalFile(partial, op.abort.signal));
    const expected = await remoteSum;
    this.checkCancelled(op);
    // A mismatch is only declared after a fresh full read: the follower never re-reads bytes rsync
    // might have rewritten in place when its own append check failed.
    if (expected !== localSum) localSum = await hashLocalFile(partial, op.abort.signal);
    this.checkCancelled(op);
    if (expected !== localSum)
      throw new ToolError(
        "verification_failed",
        "the downloaded partial does not match the remote file's SHA-256; the partial was kept",
      );
    // overwrite is decided now, at commit time, against what exists now
    let final: { abs: string };
    try {
      final = root.destination(local, overwrite);
    } catch (e) {
      // refused at publication: the verified bytes are not kept for a destination that went away
      if (e instanceof ToolError && e.code !== "local_path_exists") {
        rmSync(partial, { force: true });
        root.forgetPartial(partial);
      }
      throw e;
    }
    try {
      root.publish(partial, final, overwrite);
    } catch (e) {
      if (e instanceof ToolError) {
        root.forgetPartial(partial);
        throw e;
      }
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "EEXIST")
        throw new ToolError(
          "local_path_exists",
          "local destination appeared during the transfer and overwrite is false",
        );
      if (code === "EXDEV")
        throw new ToolError(
          "transfer_publish_failed",
          "the local destination is on another filesystem than the local root's state directory",
        );
      throw new ToolError("transfer_publish_failed", `the download could not be published (${code ?? "error"})`);
    }
    root.forgetPartial(partial);
    op.data.sha256 = localSum;
  }

  private async upload(op: Op, srcAbs: string, srcDisplay: string, remote: string, overwrite: boolean): Promise<void> {
    const size = lstatSync(srcAbs).size;
    op.data.total_bytes = size;
    const dir = posix.dirname(remote);
    // no wildcard characters in the partial's own name: the receiving rsync would keep a pattern
    // that matches nothing (a partial not yet created) verbatim, escapes included
    const base = posix.basename(remote).replace(/[*?[]/g, "_");
    const tag = token(["upload", cacheKey(this.session.target), srcDisplay, remote]);
    const partial = posix.join(dir, `.${base}.${tag}.lsm-partial`);
    const prep = await remoteScript(
      this.session,
      `f=${shq(remote)}; p=${shq(partial)}; d=${shq(dir)}
[ -d "$d" ] || exit 81
if [ ${overwrite ? 1 : 0} = 0 ]; then if [ -e "$f" ] || [ -L "$f" ]; then exit 80; fi; fi
if [ -L "$f" ] || { [ -e "$f" ] && [ ! -f "$f" ]; }; then exit 82; fi
if [ -L "$p" ]; then exit 74; fi
s=0
if [ -e "$p" ]; then
  [ -f "$p" ] || exit 75
  s=$(stat -c %s -- "$p") || exit 76
  if [ "$s" -gt ${size} ]; then rm -f -- "$p" || exit 77; s=0; fi
fi
a=$(df -Pk -- "$d" 2>/dev/null | awk 'NR==2 {print $4}')
printf '%s %s\\n' "$s" "\${a:-unknown}"
`,
      op.abort.signal,
    );
    this.checkCancelled(op);
    if (prep.code === 80) throw new ToolError("remote_path_exists", "remote destination exists and overwrite is false");
    if (prep.code === 81) throw new ToolError("remote_path_not_found", "remote destination directory does not exist");
    if (prep.code === 82) throw new ToolError("invalid_remote_type", "remote destination is not a regular file");
    if (prep.code !== 0) throw new ToolError("invalid_transfer_partial", "the remote transfer partial cannot be used");
    const [haveText, freeText] = prep.stdout.trim().split(" ");
    const have = Number(haveText) || 0;
    op.data.resumed_from = have;
    op.data.bytes_transferred = have;
    if (freeText && /^\d+$/.test(freeText) && Number(freeText) * 1024 < size - have) {
      throw new ToolError("insufficient_remote_space", "not enough free space on the remote filesystem");
    }
    // The source is hashed while rsync sends it (one read each, concurrently); the remote partial
    // can only be hashed once rsync has finished writing it.
    const sideline = new AbortController();
    this.settings.localRoot.rememberRemotePartial(cacheKey(this.session.target), partial);
    const localSumP = hashLocalFile(srcAbs, AbortSignal.any([op.abort.signal, sideline.signal]));
    localSumP.catch(() => undefined);
    try {
      await this.rsync(op, srcAbs, rsyncRemote(this.session.target, partial), (n) =>
        this.progress(op, Math.min(size, n)),
      );
    } catch (e) {
      sideline.abort();
      throw e;
    }
    this.progress(op, size);
    op.data.state = "verifying";
    const [localSum, remoteSum] = await Promise.all([localSumP, remoteHash(this.session, partial, op.abort.signal)]);
    this.checkCancelled(op);
    if (remoteSum !== localSum)
      throw new ToolError(
        "verification_failed",
        "the uploaded partial does not match the local file's SHA-256; the partial was kept",
      );
    const publish = await remoteScript(
      this.session,
      `f=${shq(remote)}; p=${shq(partial)}
if [ ${overwrite ? 1 : 0} = 1 ]; then
  if [ -L "$f" ] || { [ -e "$f" ] && [ ! -f "$f" ]; }; then exit 82; fi
  mv -fT -- "$p" "$f" || exit 81
else
  if ln -- "$p" "$f" 2>/dev/null; then rm -f -- "$p"; exit 0; fi
  if [ -e "$f" ] || [ -L "$f" ]; then rm -f -- "$p"; exit 80; fi
  exit 81
fi
`,
    );
    if (publish.code === 80)
      throw new ToolError(
        "remote_path_exists",
        "remote destination appeared during the transfer and overwrite is false",
      );
    if (publish.code === 82) throw new ToolError("invalid_remote_type", "remote destination is not a regular file");
    if (publish.code !== 0)
      throw new ToolError("transfer_publish_failed", "the upload could not be published on the remote host");
    this.settings.localRoot.forgetRemotePartials(cacheKey(this.session.target), [partial]);
    op.data.sha256 = localSum;
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
