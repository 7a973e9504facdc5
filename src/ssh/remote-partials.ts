/**
 * The sweep of stale remote upload partials we recorded creating (per target), run when a session
 * to that target connects.
 */
import type { Remote } from "./channel.ts";
import { type LocalRoot, SWEEP_AGE_MS } from "./localroot.ts";
import { remoteScript } from "./ops.ts";
import { shq } from "./proc.ts";

/**
 * Removes this target's stale upload partials that we recorded creating: only regular files (not
 * symlinks) owned by the remote account, with our suffix, whose record and mtime are both older than
 * the sweep age. Records of partials that are gone or not ours are dropped; fresh ones are kept.
 */
export async function sweepRemotePartials(remote: Remote, root: LocalRoot, key: string): Promise<number> {
  const stale = root.staleRemotePartials(key);
  if (stale.length === 0) return 0;
  const minutes = Math.ceil(SWEEP_AGE_MS / 60_000);
  const checks = stale
    .map(
      (p) =>
        `p=${shq(p)}
if [ -L "$p" ]; then echo other
elif [ ! -e "$p" ]; then echo gone
elif [ ! -f "$p" ] || [ ! -O "$p" ]; then echo other
elif [ -n "$(find "$p" -maxdepth 0 -mmin +${minutes} -print 2>/dev/null)" ]; then
  rm -f -- "$p" && echo removed || echo kept
else echo kept; fi
`,
    )
    .join("");
  const r = await remoteScript(remote, checks);
  if (r.code !== 0) return 0;
  const verdicts = r.stdout.split("\n");
  const settled = stale.filter((_, i) => ["gone", "removed", "other"].includes(verdicts[i] ?? ""));
  root.forgetRemotePartials(key, settled);
  return stale.filter((_, i) => verdicts[i] === "removed").length;
}
