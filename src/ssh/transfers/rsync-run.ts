import { ToolError } from "../../core/errors.ts";
import type { Remote } from "../channel.ts";
import { destination, type Target } from "../master.ts";
import { rsyncFailure, runRsync } from "../rsync.ts";
import type { SshSettings } from "../settings.ts";
import { checkCancelled, type Op } from "./operation.ts";

/** What a download or an upload runs against: the session (its mux and target) and the server's settings. */
export interface TransferContext {
  readonly session: Remote & { readonly target: Target };
  readonly settings: SshSettings;
}

/**
 * Runs rsync over the mux for `op`; resolves on success, throws a mapped error otherwise. The
 * process is kept on `op` while it runs, so a cancellation can stop its group.
 */
export async function rsyncFor(
  ctx: TransferContext,
  op: Op,
  src: string,
  dst: string,
  onProgress: (parsed: number) => void,
): Promise<void> {
  checkCancelled(op);
  const master = ctx.session.master;
  await master.ensureReady();
  const { code, noSpace } = await runRsync(
    {
      rsync: ctx.settings.bin.rsync,
      runner: ctx.settings.bin.runner,
      copyLinks: op.data.direction === "download",
      shell: [...master.transport(), ...destination(ctx.session.target).args],
      bwlimitKiB: ctx.settings.transferBwlimitKiB,
      src,
      dst,
    },
    (proc) => (op.proc = proc),
    onProgress,
  );
  op.proc = undefined;
  op.data.exit_code = code;
  checkCancelled(op);
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
