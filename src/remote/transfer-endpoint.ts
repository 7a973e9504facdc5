/**
 * The controller's side of a remote session in `session_copy`: each endpoint method is one internal
 * `transfer_*` operation on the session's worker, bound to the session's pinned workdir. Chunk bytes
 * cross the channel as binary frame bodies; results are checked for shape before they are used.
 */
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import type {
  BeginWrite,
  ChunkRead,
  HttpCall,
  PackDir,
  StatResult,
  TransferEndpoint,
  UnpackArchive,
} from "../transfer/endpoint.ts";
import type { TransferPath } from "../transfer/paths.ts";
import type { PinnedSide } from "../transfer/session-copy.ts";
import type { RemoteManager } from "./manager.ts";
import type { CallResult } from "./worker-channel.ts";

/** Chunk and bookkeeping calls are quick; a stalled worker must not hold a copy for the job timeout. */
const CHUNK_DEADLINE_MS = 120_000;
/** Failures of the link, not of the operation: the call may be made again when the worker is back. */
const LINK_FAILURES = new Set([
  "remote_worker_offline",
  "remote_outcome_unknown",
  "remote_timeout",
  "remote_worker_restarted",
  "remote_queue_full",
]);
/** Room left in a frame for the JSON beside a chunk. */
const FRAME_HEADROOM = 64 * 1024;

const Size = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const Sha = z.string().regex(/^[0-9a-f]{64}$/);
const Text = z.string().max(8192);
const Temp = z.object({ path: Text, temp: z.literal(true) });
const Stat = z.object({
  path: Text,
  resolved_path: Text,
  kind: z.enum(["file", "dir", "other"]),
  size: Size,
  mode: z.number().int().min(0).max(0o7777),
  identity: Text,
  sha256: Sha.nullable(),
});
const Chunk = z.object({
  path: Text,
  offset: Size,
  bytes: Size,
  size: Size,
  eof: z.boolean(),
  sha256: Sha,
  identity: Text,
});
const Begin = z.object({ transfer_id: z.string().regex(/^[A-Za-z0-9_-]{1,80}$/), offset: Size, resumed: z.boolean() });
const Written = z.object({ offset: Size, bytes: Size });
const Finished = z.object({ bytes: Size, sha256: Sha, resolved_path: Text });
const Copied = Finished.extend({ resumed_bytes: Size });
const Packed = z.object({
  path: Text,
  archive: Temp,
  bytes: Size,
  sha256: Sha,
  compression: z.enum(["gz", "none"]),
  entries: Size,
});
const Unpacked = z.object({
  path: Text,
  resolved_path: Text,
  entries: Size,
  completed: z.boolean(),
  archive_deleted: z.boolean(),
  backup_deleted: z.boolean(),
  cleanup_errors: z.array(Text).max(1000),
});
const Moved = z.object({
  bytes: Size,
  sha256: Sha,
  chunks: Size,
  chunk_size: Size,
  resumed_bytes: Size,
  completed: z.boolean(),
});
const Downloaded = Moved.extend({ resolved_path: Text });

const sha256Of = (data: Uint8Array) => new Bun.CryptoHasher("sha256").update(data).digest("hex");
const arg = (p: TransferPath) => (p.temp ? { path: p.path, temp: true } : { path: p.path });

export class RemoteTransferEndpoint implements TransferEndpoint {
  readonly target = "remote" as const;
  readonly machine: string;
  private readonly workdir: string;

  constructor(
    private readonly manager: RemoteManager,
    side: PinnedSide,
    private readonly signal: AbortSignal,
  ) {
    if (!side.machine) throw new ToolError("session_not_found", `session ${side.session_id} has no worker binding`);
    this.machine = side.machine;
    this.workdir = side.workdir;
  }

  /** The worker speaks the gateway protocol, and is connected now (http_stream needs it online). */
  get httpTransfer(): boolean {
    return (
      this.manager.online(this.machine) &&
      (this.manager.store.byName(this.machine)?.capabilities ?? []).includes("http-transfer-v1")
    );
  }

  /** One operation; its result must fit `schema` (a worker's answer is checked, never trusted as is). */
  private async call<S extends z.ZodType>(
    op: string,
    args: Record<string, unknown>,
    schema: S,
    opts: { body?: Uint8Array; deadlineMs?: number; cleanup?: boolean } = {},
  ): Promise<{ data: z.output<S>; body?: Uint8Array }> {
    // Cleanup (abort a write, delete a temp file) is not tied to the copy's signal: a cancelled
    // copy must still remove its partial file on the worker.
    const signal = opts.cleanup ? undefined : this.signal;
    const callArgs = { ...args, workdir: this.workdir };
    const deadlineMs = opts.deadlineMs ?? CHUNK_DEADLINE_MS;
    let r: CallResult;
    try {
      r = await this.manager.call(this.machine, op, callArgs, {
        signal,
        deadlineMs,
        ...(opts.body ? { body: opts.body } : {}),
      });
    } catch (e) {
      // A cleanup the worker could not get now (away, stalled) is made again once it is back, so a
      // cut copy's partial file does not stay for good.
      if (opts.cleanup && e instanceof ToolError && LINK_FAILURES.has(e.code)) {
        this.manager.whenBack(
          this.machine,
          () => void this.manager.call(this.machine, op, callArgs, { deadlineMs }).catch(() => undefined),
        );
      }
      throw e;
    }
    const parsed = schema.safeParse(r.data);
    if (!parsed.success)
      throw new ToolError("remote_protocol_error", `worker ${this.machine} answered ${op} with a malformed result`);
    return { data: parsed.data, ...(r.body ? { body: r.body } : {}) };
  }

  /** Long operations (hashing, packing, whole-file transfers) run under the job timeout. */
  private get longMs(): number {
    return this.manager.settings.remote_job_timeout_s * 1000;
  }

  async stat(p: TransferPath, opts: { sha256: boolean }): Promise<StatResult> {
    return (
      await this.call("transfer_stat", { ...arg(p), sha256: opts.sha256 }, Stat, {
        deadlineMs: opts.sha256 ? this.longMs : undefined,
      })
    ).data;
  }

  async readChunk(p: TransferPath, offset: number, length: number): Promise<ChunkRead> {
    // A chunk and its header travel in one frame, which must fit max_http_request_bytes; a shorter
    // read is fine (the relay continues from where the chunk ended).
    const r = await this.call("transfer_read_chunk", { ...arg(p), offset, length: this.frameBytes(length) }, Chunk);
    const data = r.body ?? new Uint8Array(0);
    const c = r.data;
    if (data.byteLength !== c.bytes)
      throw new ToolError(
        "remote_protocol_error",
        `worker ${this.machine} sent ${data.byteLength} bytes for a ${c.bytes}-byte chunk`,
      );
    return { ...c, data };
  }

  async beginWrite(
    p: TransferPath,
    opts: { overwrite: boolean; expected_bytes: number; transfer_id: string | null },
  ): Promise<BeginWrite> {
    return (await this.call("transfer_begin_write", { ...arg(p), ...opts }, Begin)).data;
  }

  async writeChunk(
    p: TransferPath,
    opts: { transfer_id: string; offset: number; data: Uint8Array; sha256: string | null },
  ): Promise<{ offset: number; bytes: number }> {
    // The worker always checks a chunk against a digest: one the sender gave, or the one taken here.
    if (opts.sha256 === null) opts = { ...opts, sha256: sha256Of(opts.data) };
    const frame = this.frameBytes(opts.data.byteLength);
    const write = (offset: number, data: Uint8Array, sha256: string) =>
      this.call(
        "transfer_write_chunk",
        { ...arg(p), transfer_id: opts.transfer_id, offset, expected_sha256: sha256 },
        Written,
        { body: data },
      );
    if (opts.data.byteLength <= frame) return (await write(opts.offset, opts.data, opts.sha256!)).data;
    // Too big for one frame (a local source read a larger chunk): the chunk is checked here against
    // its digest, then sent in pieces, each verified by the worker against its own digest.
    if (sha256Of(opts.data) !== opts.sha256)
      throw new ToolError(
        "transfer_chunk_checksum_mismatch",
        `the chunk at offset ${opts.offset} does not match its sha256`,
      );
    for (let at = 0; at < opts.data.byteLength; at += frame) {
      const piece = opts.data.subarray(at, Math.min(opts.data.byteLength, at + frame));
      await write(opts.offset + at, piece, sha256Of(piece));
    }
    return { offset: opts.offset, bytes: opts.data.byteLength };
  }

  /** The most chunk bytes one frame may carry (max_http_request_bytes less room for the JSON; 0 = no limit). */
  private frameBytes(wanted: number): number {
    const limit = this.manager.settings.max_http_request_bytes;
    return limit > 0 ? Math.min(wanted, Math.max(FRAME_HEADROOM, limit - FRAME_HEADROOM)) : wanted;
  }

  async finishWrite(
    p: TransferPath,
    opts: { transfer_id: string; expected_bytes: number; expected_sha256: string | null; mode: number | null },
  ) {
    return (await this.call("transfer_finish_write", { ...arg(p), ...opts }, Finished, { deadlineMs: this.longMs }))
      .data;
  }

  async abortWrite(p: TransferPath, transferId: string): Promise<void> {
    await this.call("transfer_abort_write", { ...arg(p), transfer_id: transferId }, z.unknown(), { cleanup: true });
  }

  async copyFile(
    src: TransferPath,
    dst: TransferPath,
    opts: { overwrite: boolean; transfer_id: string | null; src_workdir?: string | null },
  ) {
    return (
      await this.call(
        "transfer_copy_file",
        {
          src: arg(src),
          dst: arg(dst),
          overwrite: opts.overwrite,
          transfer_id: opts.transfer_id,
          src_workdir: opts.src_workdir ?? null,
        },
        Copied,
        { deadlineMs: this.longMs },
      )
    ).data;
  }

  async allocTempPath(compression: "gz" | "none"): Promise<TransferPath> {
    return (await this.call("transfer_alloc_temp_path", { compression }, Temp)).data;
  }

  async packDir(p: TransferPath, compression: "gz" | "none"): Promise<PackDir> {
    return (await this.call("transfer_pack_dir", { ...arg(p), compression }, Packed, { deadlineMs: this.longMs })).data;
  }

  async unpackArchive(
    archive: TransferPath,
    dst: TransferPath,
    opts: { overwrite: boolean; cleanup_archive: boolean },
  ): Promise<UnpackArchive> {
    return (
      await this.call("transfer_unpack_archive", { archive: arg(archive), dst: arg(dst), ...opts }, Unpacked, {
        deadlineMs: this.longMs,
      })
    ).data;
  }

  async deleteTemp(p: TransferPath): Promise<void> {
    await this.call("transfer_delete_temp_path", arg(p), z.unknown(), { cleanup: true });
  }

  private httpArgs(call: HttpCall) {
    const { signal: _s, ...rest } = call;
    return rest;
  }

  async httpUpload(p: TransferPath, call: HttpCall) {
    return (
      await this.call("transfer_http_upload", { ...arg(p), ...this.httpArgs(call) }, Moved, { deadlineMs: this.longMs })
    ).data;
  }

  async httpDownload(
    p: TransferPath,
    call: HttpCall & { overwrite: boolean; transfer_id: string; mode?: number | null },
  ) {
    return (
      await this.call("transfer_http_download", { ...arg(p), ...this.httpArgs(call) }, Downloaded, {
        deadlineMs: this.longMs,
      })
    ).data;
  }
}
