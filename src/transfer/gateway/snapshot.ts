import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { ToolError } from "../../core/errors.ts";
import { sourceIdentity } from "./object.ts";
import type { GatewayStore } from "./store.ts";

/**
 * The controller's snapshot of a local source into a gateway spool (seed: "Local sources are copied
 * through a no-follow stable file handle into an owner-private immutable spool before they are
 * served"). Downloads read the spool as it grows; its running digest becomes the object's digest at
 * the last byte, so the source is read once, not hashed up front and then copied.
 */

/** Bytes a snapshot copies between two turns of the event loop. */
const SNAPSHOT_CHUNK = 4 * 1024 * 1024;

/** The identity a local source has now (opened without following links); source_changed if it is not a file. */
export function localSourceIdentity(path: string): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const st = fstatSync(fd, { bigint: true });
    if (!st.isFile()) throw new ToolError("source_changed", "the source is no longer a regular file");
    return sourceIdentity(st);
  } finally {
    closeSync(fd);
  }
}

/**
 * Copies `path` into the object's spool from its cursor through one no-follow handle. The file must
 * be the one the object was prepared for (its recorded identity: device, inode, size, mtime, ctime)
 * when opened and again after the last piece was read, before that piece settles the object: a
 * source written meanwhile never becomes a `ready` object, and a retry after such a change starts a
 * new object (gateway/store.ts `resumable`).
 */
export async function snapshotSource(
  store: GatewayStore,
  id: string,
  path: string,
  signal: AbortSignal,
): Promise<void> {
  const src = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const want = store.object(id).source_identity ?? null;
    const size = store.object(id).expected_bytes;
    const same = () => {
      const st = fstatSync(src, { bigint: true });
      // The object's size too: an identity taken after the file changed size still names a file of another size.
      return st.isFile() && Number(st.size) === size && (want === null || sourceIdentity(st) === want);
    };
    if (!same()) throw new ToolError("source_changed", "the source changed before it was snapshotted");
    const buf = Buffer.allocUnsafe(SNAPSHOT_CHUNK);
    for (;;) {
      if (signal.aborted) throw new ToolError("cancelled", "the copy was cancelled");
      const m = store.object(id);
      const at = m.offset;
      if (at >= size || m.state !== "uploading") break;
      const n = Math.min(buf.length, size - at);
      for (let got = 0; got < n; ) {
        const r = readSync(src, buf, got, n - got, at + got);
        if (r <= 0) throw new ToolError("source_changed", "the source became shorter while it was snapshotted");
        got += r;
      }
      if (at + n === size && !same())
        throw new ToolError("source_changed", "the source changed while it was snapshotted");
      await store.appendSnapshot(id, at, buf.subarray(0, n));
      // Downloads of what is already here run between the pieces.
      await new Promise((r) => setImmediate(r));
    }
    if (!same()) throw new ToolError("source_changed", "the source changed while it was snapshotted");
    const m = store.object(id);
    if (m.state !== "ready")
      throw new ToolError(
        m.state === "failed" ? "source_changed" : "transfer_incomplete",
        m.state === "failed"
          ? "the snapshot does not match the source's sha256 (the source changed during the copy)"
          : `the snapshot is ${m.state}`,
      );
  } finally {
    closeSync(src);
  }
}
