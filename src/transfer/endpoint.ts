import type { TransferPath } from "./paths.ts";

/**
 * One side of a copy. The local implementation acts on this host (local-endpoint.ts); a remote one
 * forwards each method to the worker's internal `transfer_*` operation (operations.ts) over the
 * worker channel. The copy orchestration (copy.ts) sees only this interface.
 */
export interface TransferEndpoint {
  readonly target: "local" | "remote";
  /** Registered worker name for remote endpoints, null locally. */
  readonly machine: string | null;
  stat(p: TransferPath, opts: { sha256: boolean }): Promise<StatResult>;
  /**
   * `digest: false` (local endpoints) skips the chunk's SHA-256 when the bytes go straight to a write
   * in this same process, where a digest of the buffer would only be checked against itself.
   */
  readChunk(p: TransferPath, offset: number, length: number, opts?: { digest?: boolean }): Promise<ChunkRead>;
  beginWrite(
    p: TransferPath,
    opts: { overwrite: boolean; expected_bytes: number; transfer_id: string | null },
  ): Promise<BeginWrite>;
  /**
   * `sha256` is the sender's digest of the chunk, checked before anything is written; null only for
   * a local destination fed bytes that came without one (gateway downloads, the controller's spool),
   * which the whole-file digest at finish covers.
   */
  writeChunk(
    p: TransferPath,
    opts: { transfer_id: string; offset: number; data: Uint8Array; sha256: string | null },
  ): Promise<{ offset: number; bytes: number }>;
  finishWrite(
    p: TransferPath,
    opts: { transfer_id: string; expected_bytes: number; expected_sha256: string | null; mode: number | null },
  ): Promise<{ bytes: number; sha256: string; resolved_path: string }>;
  abortWrite(p: TransferPath, transferId: string): Promise<void>;
  /**
   * Local endpoints only: makes a complete, verified, immutable file on this host (the gateway's
   * ready spool) the write's temp file by a hard link (DestinationWrite.adopt). False across
   * filesystems. finishWrite publishes it.
   */
  adoptFile?(
    p: TransferPath,
    opts: {
      transfer_id: string;
      overwrite: boolean;
      expected_bytes: number;
      source: { path: string; dev: number; ino: number; sha256: string };
    },
  ): Promise<boolean>;
  /**
   * A copy within this endpoint's host (same worker): one verified, atomic write transaction. A
   * remote endpoint sends `src_workdir` so the worker binds the source to its own session's workdir.
   */
  copyFile(
    src: TransferPath,
    dst: TransferPath,
    opts: { overwrite: boolean; transfer_id: string | null; src_workdir?: string | null },
  ): Promise<{ bytes: number; sha256: string; resumed_bytes: number; resolved_path: string }>;
  /** A fresh name for an incoming archive in the endpoint's private temp dir. */
  allocTempPath(compression: "gz" | "none"): Promise<TransferPath>;
  packDir(p: TransferPath, compression: "gz" | "none"): Promise<PackDir>;
  unpackArchive(
    archive: TransferPath,
    dst: TransferPath,
    opts: { overwrite: boolean; cleanup_archive: boolean },
  ): Promise<UnpackArchive>;
  deleteTemp(p: TransferPath): Promise<void>;
  /** Whether the endpoint speaks the gateway protocol (a worker advertising `http-transfer-v1`). */
  readonly httpTransfer: boolean;
  /** Worker side of http_stream: upload this file to the controller gateway (gateway/client.ts). */
  httpUpload(
    p: TransferPath,
    call: HttpCall,
  ): Promise<{
    bytes: number;
    sha256: string;
    chunks: number;
    chunk_size: number;
    resumed_bytes: number;
    completed: boolean;
  }>;
  /** Worker side of http_stream: download a ready gateway object into a resumable write. */
  httpDownload(
    p: TransferPath,
    call: HttpCall & { overwrite: boolean; transfer_id: string; mode?: number | null },
  ): Promise<{
    bytes: number;
    sha256: string;
    chunks: number;
    chunk_size: number;
    resumed_bytes: number;
    completed: boolean;
    resolved_path: string;
  }>;
}

export interface HttpCall {
  url: string;
  controller_url: string;
  authorization: string;
  worker: string;
  expected_bytes: number;
  /**
   * The object's digest. Null only for a download of a local source's snapshot: the worker reads the
   * digest the snapshot settled (HEAD) after the last byte and verifies against it before publishing.
   */
  expected_sha256: string | null;
  chunk_size: number;
  signal?: AbortSignal;
  /**
   * The worker's own channel token, added by the worker (never sent by the controller): the
   * gateway finds the worker by it and honours a capability only for the worker it was issued to.
   */
  credential?: string;
}

export interface StatResult {
  path: string;
  /** Workspace-relative (local) or worker-reported resolved path. */
  resolved_path: string;
  kind: "file" | "dir" | "other";
  size: number;
  mode: number;
  /** `dev:ino`, checked again while chunks are read. */
  identity: string;
  sha256: string | null;
}

export interface ChunkRead {
  path: string;
  offset: number;
  bytes: number;
  size: number;
  eof: boolean;
  /** Null only when the caller asked for no digest. */
  sha256: string | null;
  identity: string;
  data: Uint8Array;
}

export interface BeginWrite {
  transfer_id: string;
  offset: number;
  resumed: boolean;
}

export interface PackDir {
  path: string;
  archive: TransferPath;
  bytes: number;
  sha256: string;
  compression: "gz" | "none";
  entries: number;
}

export interface UnpackArchive {
  path: string;
  resolved_path: string;
  entries: number;
  completed: boolean;
  archive_deleted: boolean;
  backup_deleted: boolean;
  cleanup_errors: string[];
}
