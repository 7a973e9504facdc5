/**
 * The controller's side of a remote session in `session_copy`: each endpoint method is one internal
 * `transfer_*` operation on the session's worker, bound to the session's pinned workdir. Chunk bytes
 * cross the channel as binary frame bodies; results are checked for shape before they are used.
 */
import { ToolError } from "../core/errors.ts";
import type { BeginWrite, ChunkRead, HttpCall, PackDir, StatResult, TransferEndpoint, UnpackArchive } from "../transfer/endpoint.ts";
import type { TransferPath } from "../transfer/paths.ts";
import type { PinnedSide } from "../transfer/session-copy.ts";
import type { CallResult, RemoteManager } from "./manager.ts";

/** Chunk and bookkeeping calls are quick; a stalled worker must not hold a copy for the job timeout. */
const CHUNK_DEADLINE_MS = 120_000;

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
    return this.manager.online(this.machine) && (this.manager.store.byName(this.machine)?.capabilities ?? []).includes("http-transfer-v1");
  }

  private async call(op: string, args: Record<string, unknown>, opts: { body?: Uint8Array; deadlineMs?: number } = {}): Promise<CallResult & { data: Record<string, unknown> }> {
    const r = await this.manager.call(this.machine, op, { ...args, workdir: this.workdir }, { signal: this.signal, deadlineMs: opts.deadlineMs ?? CHUNK_DEADLINE_MS, ...(opts.body ? { body: opts.body } : {}) });
    if (!r.data || typeof r.data !== "object") throw new ToolError("remote_protocol_error", `worker ${this.machine} answered ${op} with a malformed result`);
    return r as CallResult & { data: Record<string, unknown> };
  }

  /** Long operations (hashing, packing, whole-file transfers) run under the job timeout. */
  private get longMs(): number {
    return this.manager.settings.remote_job_timeout_s * 1000;
  }

  async stat(p: TransferPath, opts: { sha256: boolean }): Promise<StatResult> {
    return (await this.call("transfer_stat", { ...arg(p), sha256: opts.sha256 }, { deadlineMs: opts.sha256 ? this.longMs : undefined })).data as unknown as StatResult;
  }

  async readChunk(p: TransferPath, offset: number, length: number): Promise<ChunkRead> {
    const r = await this.call("transfer_read_chunk", { ...arg(p), offset, length });
    const data = r.body ?? new Uint8Array(0);
    const c = r.data as unknown as Omit<ChunkRead, "data">;
    if (data.byteLength !== c.bytes) throw new ToolError("remote_protocol_error", `worker ${this.machine} sent ${data.byteLength} bytes for a ${c.bytes}-byte chunk`);
    return { ...c, data };
  }

  async beginWrite(p: TransferPath, opts: { overwrite: boolean; expected_bytes: number; transfer_id: string | null }): Promise<BeginWrite> {
    return (await this.call("transfer_begin_write", { ...arg(p), ...opts })).data as unknown as BeginWrite;
  }

  async writeChunk(p: TransferPath, opts: { transfer_id: string; offset: number; data: Uint8Array; sha256: string }): Promise<{ offset: number; bytes: number }> {
    const r = await this.call("transfer_write_chunk", { ...arg(p), transfer_id: opts.transfer_id, offset: opts.offset, expected_sha256: opts.sha256 }, { body: opts.data });
    return r.data as { offset: number; bytes: number };
  }

  async finishWrite(p: TransferPath, opts: { transfer_id: string; expected_bytes: number; expected_sha256: string | null; mode: number | null }) {
    return (await this.call("transfer_finish_write", { ...arg(p), ...opts }, { deadlineMs: this.longMs })).data as { bytes: number; sha256: string; resolved_path: string };
  }

  async abortWrite(p: TransferPath, transferId: string): Promise<void> {
    await this.call("transfer_abort_write", { ...arg(p), transfer_id: transferId });
  }

  async copyFile(src: TransferPath, dst: TransferPath, opts: { overwrite: boolean; transfer_id: string | null; src_workdir?: string | null }) {
    const r = await this.call("transfer_copy_file", { src: arg(src), dst: arg(dst), overwrite: opts.overwrite, transfer_id: opts.transfer_id, src_workdir: opts.src_workdir ?? null }, { deadlineMs: this.longMs });
    return r.data as { bytes: number; sha256: string; resumed_bytes: number; resolved_path: string };
  }

  async allocTempPath(compression: "gz" | "none"): Promise<TransferPath> {
    const r = (await this.call("transfer_alloc_temp_path", { compression })).data;
    if (typeof r.path !== "string") throw new ToolError("remote_protocol_error", `worker ${this.machine} returned no temp path`);
    return { path: r.path, temp: true };
  }

  async packDir(p: TransferPath, compression: "gz" | "none"): Promise<PackDir> {
    return (await this.call("transfer_pack_dir", { ...arg(p), compression }, { deadlineMs: this.longMs })).data as unknown as PackDir;
  }

  async unpackArchive(archive: TransferPath, dst: TransferPath, opts: { overwrite: boolean; cleanup_archive: boolean }): Promise<UnpackArchive> {
    return (await this.call("transfer_unpack_archive", { archive: arg(archive), dst: arg(dst), ...opts }, { deadlineMs: this.longMs })).data as unknown as UnpackArchive;
  }

  async deleteTemp(p: TransferPath): Promise<void> {
    await this.call("transfer_delete_temp_path", arg(p));
  }

  private httpArgs(call: HttpCall) {
    const { signal: _s, ...rest } = call;
    return rest;
  }

  async httpUpload(p: TransferPath, call: HttpCall) {
    const r = await this.call("transfer_http_upload", { ...arg(p), ...this.httpArgs(call) }, { deadlineMs: this.longMs });
    return r.data as { bytes: number; sha256: string; chunks: number; chunk_size: number; resumed_bytes: number; completed: boolean };
  }

  async httpDownload(p: TransferPath, call: HttpCall & { overwrite: boolean; transfer_id: string }) {
    const r = await this.call("transfer_http_download", { ...arg(p), ...this.httpArgs(call) }, { deadlineMs: this.longMs });
    return r.data as { bytes: number; sha256: string; chunks: number; chunk_size: number; resumed_bytes: number; completed: boolean; resolved_path: string };
  }
}
