/**
 * A download: rsync appends to a deterministic partial in the local root's private partial
 * directory, both SHA-256s run alongside the copy, and the verified partial is published to the
 * local destination (moved there, then re-checked), with overwrite decided at that moment.
 */
import { lstatSync, rmSync, statfsSync } from "node:fs";
import { dirname } from "node:path";
import { ToolError } from "../../core/errors.ts";
import { FollowingHasher, hashLocalFile } from "../hashing.ts";
import { remoteHash, statPath } from "../ops.ts";
import { rsyncRemote } from "../rsync.ts";
import { cacheKey, token } from "./keys.ts";
import { checkCancelled, type Op, progress } from "./operation.ts";
import { rsyncFor, type TransferContext } from "./rsync-run.ts";

export async function download(
  ctx: TransferContext,
  op: Op,
  remote: string,
  local: string,
  overwrite: boolean,
): Promise<void> {
  const root = ctx.settings.localRoot;
  const st = await statPath(ctx.session, ctx.settings, remote, op.abort.signal);
  if (st.type !== "regular") throw new ToolError("invalid_remote_type", "remote source is not a regular file");
  op.data.total_bytes = st.size;
  const dest = root.destination(local, overwrite);
  const partial = root.partialFor(token(["download", cacheKey(ctx.session.target), remote, dest.display]));
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
      progress(op, lstatSync(partial).size);
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
  const remoteSum = remoteHash(ctx.session, remote, hashSignal);
  remoteSum.catch(() => undefined);
  const follower = new FollowingHasher(partial, hashSignal);
  let copied = false;
  try {
    await rsyncFor(ctx, op, rsyncRemote(ctx.session.target, remote), partial, () => undefined);
    copied = true;
  } finally {
    clearInterval(poll);
    // a failed copy stops both hashes (the remote one is a channel of this session)
    if (!copied) sideline.abort();
  }
  progress(op, lstatSync(partial).size);
  op.data.state = "verifying";
  let localSum = (await follower.finish()) ?? (await hashLocalFile(partial, op.abort.signal));
  const expected = await remoteSum;
  checkCancelled(op);
  // A mismatch is only declared after a fresh full read: the follower never re-reads bytes rsync
  // might have rewritten in place when its own append check failed.
  if (expected !== localSum) localSum = await hashLocalFile(partial, op.abort.signal);
  checkCancelled(op);
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
      throw new ToolError("local_path_exists", "local destination appeared during the transfer and overwrite is false");
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
