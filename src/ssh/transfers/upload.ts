/**
 * An upload: a deterministic partial beside the remote destination (checked and sized by one remote
 * script), the local source hashed while rsync sends it, the remote partial hashed after, and the
 * partial published by a same-directory rename (overwrite) or link.
 */
import { lstatSync } from "node:fs";
import { posix } from "node:path";
import { ToolError } from "../../core/errors.ts";
import { hashLocalFile } from "../hashing.ts";
import { remoteHash, remoteScript } from "../ops.ts";
import { shq } from "../proc.ts";
import { rsyncRemote } from "../rsync.ts";
import { cacheKey, token } from "./keys.ts";
import { checkCancelled, type Op, progress } from "./operation.ts";
import { rsyncFor, type TransferContext } from "./rsync-run.ts";

export async function upload(
  ctx: TransferContext,
  op: Op,
  srcAbs: string,
  srcDisplay: string,
  remote: string,
  overwrite: boolean,
): Promise<void> {
  const size = lstatSync(srcAbs).size;
  op.data.total_bytes = size;
  const dir = posix.dirname(remote);
  // no wildcard characters in the partial's own name: the receiving rsync would keep a pattern
  // that matches nothing (a partial not yet created) verbatim, escapes included
  const base = posix.basename(remote).replace(/[*?[]/g, "_");
  const tag = token(["upload", cacheKey(ctx.session.target), srcDisplay, remote]);
  const partial = posix.join(dir, `.${base}.${tag}.lsm-partial`);
  const prep = await remoteScript(
    ctx.session,
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
  checkCancelled(op);
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
  ctx.settings.localRoot.rememberRemotePartial(cacheKey(ctx.session.target), partial);
  const localSumP = hashLocalFile(srcAbs, AbortSignal.any([op.abort.signal, sideline.signal]));
  localSumP.catch(() => undefined);
  try {
    await rsyncFor(ctx, op, srcAbs, rsyncRemote(ctx.session.target, partial), (n) => progress(op, Math.min(size, n)));
  } catch (e) {
    sideline.abort();
    throw e;
  }
  progress(op, size);
  op.data.state = "verifying";
  const [localSum, remoteSum] = await Promise.all([localSumP, remoteHash(ctx.session, partial, op.abort.signal)]);
  checkCancelled(op);
  if (remoteSum !== localSum)
    throw new ToolError(
      "verification_failed",
      "the uploaded partial does not match the local file's SHA-256; the partial was kept",
    );
  const publish = await remoteScript(
    ctx.session,
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
    throw new ToolError("remote_path_exists", "remote destination appeared during the transfer and overwrite is false");
  if (publish.code === 82) throw new ToolError("invalid_remote_type", "remote destination is not a regular file");
  if (publish.code !== 0)
    throw new ToolError("transfer_publish_failed", "the upload could not be published on the remote host");
  ctx.settings.localRoot.forgetRemotePartials(cacheKey(ctx.session.target), [partial]);
  op.data.sha256 = localSum;
}
