/**
 * rsync over a session's mux: the exact remote operand, one supervised rsync run with progress
 * parsing, and the meaning of its exit statuses.
 */
import type { Subprocess } from "bun";
import { ToolError } from "../core/errors.ts";
import { rsyncHost, type Target } from "./master.ts";
import { drainTail, shq, spawnGroup } from "./proc.ts";

const PROGRESS_RE = /(?:^|[\r\n])\s*([0-9][0-9,]*)\s+[0-9]+%/g;
/**
 * rsync's stderr is shared with its ssh mux client, which hands it to the master: on a stalled
 * network the master holds it open long after rsync is gone, so it is drained only this long.
 */
const STDERR_DRAIN_GRACE_MS = 250;

/**
 * The rsync operand naming exactly the remote `path`: a relative path gets `./` (a leading `:`
 * would select rsync's daemon mode), and since the remote rsync expands wildcards itself even with
 * --protect-args, each component holding `*`, `?` or `[` has those escaped. rsync's own check of
 * the names it receives cannot match such a component that also holds a backslash: refused.
 */
export function rsyncRemote(target: Target, path: string): string {
  const exact = path
    .split("/")
    .map((c) => {
      if (!/[*?[]/.test(c)) return c;
      if (c.includes("\\"))
        throw new ToolError(
          "invalid_remote_path",
          "rsync cannot name a remote path component holding both a wildcard character and a backslash",
        );
      return c.replace(/[*?[]/g, "\\$&");
    })
    .join("/");
  return `${rsyncHost(target)}:${path.startsWith("/") ? exact : `./${exact}`}`;
}

const RSYNC_MEANINGS: Record<number, string> = {
  5: "error starting the client-server protocol",
  10: "socket I/O error",
  11: "file I/O error",
  12: "protocol data stream error",
  23: "partial transfer because of an error",
  24: "source files vanished",
  30: "timeout in data send or receive",
  35: "timeout waiting for the daemon connection",
  255: "the remote shell failed",
};

/** The error for a failed rsync exit status. */
export function rsyncFailure(code: number): ToolError {
  const meaning = RSYNC_MEANINGS[code];
  return new ToolError("transfer_failed", `rsync exited with status ${code}${meaning ? ` (${meaning})` : ""}`);
}

export interface RsyncRun {
  rsync: string;
  /** lsm-runner, so rsync (and the ssh it starts) dies with the server. */
  runner: string;
  /** The mux-client argv rsync uses as its remote shell. */
  shell: string[];
  bwlimitKiB: number;
  /**
   * Follow a symlink source (downloads: the remote path is checked with `stat -L`, so it is followed like stat does).
   */
  copyLinks: boolean;
  src: string;
  dst: string;
}

/**
 * Runs one rsync (in its own process group, `started` receives it for cancellation) and returns its
 * exit status and whether a receiver ran out of space; `onProgress` gets the byte counts rsync
 * reports. stderr is otherwise dropped: it can carry OpenSSH diagnostics.
 */
export async function runRsync(
  run: RsyncRun,
  started: (proc: Subprocess) => void,
  onProgress: (parsed: number) => void,
): Promise<{ code: number; noSpace: boolean }> {
  const argv = [run.rsync, "--partial", "--append-verify", "--protect-args", "--info=progress2", "--no-motd"];
  if (run.bwlimitKiB > 0) argv.push(`--bwlimit=${run.bwlimitKiB}`);
  if (run.copyLinks) argv.push("--copy-links");
  argv.push("-e", run.shell.map(shq).join(" "), "--", run.src, run.dst);
  const proc = spawnGroup(argv, {
    env: { ...process.env, LC_ALL: "C" },
    stdout: "pipe",
    stderr: "pipe",
    runner: run.runner,
  });
  started(proc);
  const stopDrain = new AbortController();
  const stderr = drainTail(proc.stderr as ReadableStream<Uint8Array>, 65_536, stopDrain.signal);
  const decoder = new TextDecoder();
  let carry = "";
  for await (const chunk of proc.stdout as ReadableStream<Uint8Array>) {
    const text = carry + decoder.decode(chunk, { stream: true });
    let last: number | undefined;
    for (const m of text.matchAll(PROGRESS_RE)) last = Number(m[1]!.replaceAll(",", ""));
    if (last !== undefined) onProgress(last);
    carry = text.slice(-64);
  }
  const code = await proc.exited;
  const timer = setTimeout(() => stopDrain.abort(), STDERR_DRAIN_GRACE_MS);
  // the tail stays private; only "a receiver's disk was full" is taken from it
  const noSpace = Buffer.from(await stderr)
    .toString("utf8")
    .includes("No space left on device");
  clearTimeout(timer);
  return { code, noSpace };
}
