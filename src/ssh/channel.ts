/**
 * Supervised remote commands over the mux. The remote side receives `<length>\n<script>` on the
 * channel's stdin, stores the script in a private temp dir, runs it in its own process group with
 * stdin from /dev/null (so a command reading stdin can never consume the script), and watches the
 * channel: when it reaches EOF (timeout, cancel, disconnect, lost transport) the group is killed.
 */
import { closeSync, constants, fsyncSync, openSync, writeSync } from "node:fs";
import type { Subprocess } from "bun";
import { ToolError } from "../core/errors.ts";
import type { Master } from "./master.ts";
import { capture, type Captured, shq, spawnGroup, stopGroup } from "./proc.ts";

/** Local grace between SIGTERM and SIGKILL for a command channel. */
const COMMAND_STOP_GRACE_MS = 3000;

/**
 * Exit statuses of the supervisor itself (before the command ran):
 * 70 no length line, 71 bad length, 72 no temp dir, 74 short script.
 */
const SUPERVISOR = `umask 077
exec 3<&0
IFS= read -r n || exit 70
case $n in ''|*[!0-9]*) exit 71;; esac
d=$(mktemp -d "\${TMPDIR:-/tmp}/lsm-ssh.XXXXXXXXXX") || exit 72
c=
trap 'rm -rf "$d"' EXIT
trap '[ -n "$c" ] && kill -s KILL -- -"$c" 2>/dev/null; exit 129' HUP INT TERM
head -c "$n" <&3 >"$d/s" || exit 74
[ "$(wc -c <"$d/s")" -eq "$n" ] || exit 74
if [ "$1" = sudo ]; then
  setsid env LC_ALL=C sudo -n -k -- /bin/bash --noprofile --norc -s <"$d/s" &
else
  setsid /bin/sh "$d/s" </dev/null &
fi
c=$!
{ while IFS= read -r _; do :; done; kill -s TERM -- -"$c"; sleep 1; kill -s KILL -- -"$c"; } <&3 >/dev/null 2>&1 &
w=$!
wait "$c"
rc=$?
kill -s TERM "$w" 2>/dev/null
kill -s TERM -- -"$c" 2>/dev/null
exit "$rc"`;

export type ChannelKind = "sh" | "sudo";

export interface ChannelRequest {
  kind: ChannelKind;
  script: string;
  timeoutMs: number;
  /** Bytes kept per stream. */
  maxBytes: number;
  signal?: AbortSignal;
  /** Absolute spool files (created exclusively, 0600) receiving each full stream. */
  spool?: { stdout: string; stderr: string };
}

export interface ChannelResult {
  code: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout: Captured;
  stderr: Captured;
  durationMs: number;
}

/** Tracks open channels so a disconnect can end them with a clear outcome. */
export class ChannelSet {
  private readonly procs = new Set<Subprocess>();
  disconnected = false;

  get size(): number {
    return this.procs.size;
  }

  add(p: Subprocess): void {
    this.procs.add(p);
  }

  delete(p: Subprocess): void {
    this.procs.delete(p);
  }

  async stopAll(): Promise<void> {
    this.disconnected = true;
    await Promise.all([...this.procs].map((p) => stopGroup(p, COMMAND_STOP_GRACE_MS)));
  }
}

function openSpool(path: string): number {
  return openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
}

/** Runs one script on the remote through the master's socket. */
export async function runChannel(master: Master, channels: ChannelSet, req: ChannelRequest): Promise<ChannelResult> {
  await master.ensureReady();
  if (req.signal?.aborted) throw new ToolError("cancelled", "the request was cancelled");
  const program = `/bin/sh -c ${shq(SUPERVISOR)} lsm-ssh ${req.kind}`;
  const started = performance.now();
  const fds = req.spool ? { out: openSpool(req.spool.stdout), err: openSpool(req.spool.stderr) } : undefined;
  let proc: Subprocess<"pipe", "pipe", "pipe">;
  try {
    proc = spawnGroup(master.channelArgv(program), { stdin: "pipe", stdout: "pipe", stderr: "pipe" }) as Subprocess<"pipe", "pipe", "pipe">;
  } catch {
    if (fds) {
      closeSync(fds.out);
      closeSync(fds.err);
    }
    throw new ToolError("connection_lost", "cannot start an SSH channel");
  }
  channels.add(proc);
  const body = Buffer.from(req.script);
  try {
    proc.stdin.write(`${body.length}\n`);
    proc.stdin.write(body);
    void Promise.resolve(proc.stdin.flush()).catch(() => undefined);
  } catch {
    // the channel already failed; its exit status tells the story
  }
  let timedOut = false;
  let cancelled = false;
  const timer = setTimeout(() => {
    timedOut = true;
    void stopGroup(proc, COMMAND_STOP_GRACE_MS);
  }, req.timeoutMs);
  const onAbort = () => {
    cancelled = true;
    void stopGroup(proc, COMMAND_STOP_GRACE_MS);
  };
  req.signal?.addEventListener("abort", onAbort, { once: true });
  const sink = (fd: number | undefined) => (fd === undefined ? undefined : (chunk: Uint8Array) => void writeSync(fd, chunk));
  try {
    const [stdout, stderr] = await Promise.all([capture(proc.stdout, req.maxBytes, sink(fds?.out)), capture(proc.stderr, req.maxBytes, sink(fds?.err))]);
    await proc.exited;
    try {
      void Promise.resolve(proc.stdin.end()).catch(() => undefined);
    } catch {
      // already closed
    }
    const durationMs = Math.round(performance.now() - started);
    if (channels.disconnected) throw new ToolError("connection_lost", "SSH connection was explicitly disconnected");
    if (cancelled) throw new ToolError("cancelled", "the request was cancelled");
    const code = timedOut ? null : proc.exitCode;
    if (code === 255) await master.ensureReady(true);
    return { code, signal: proc.signalCode === null ? null : String(proc.signalCode), timedOut, stdout, stderr, durationMs };
  } finally {
    clearTimeout(timer);
    req.signal?.removeEventListener("abort", onAbort);
    channels.delete(proc);
    if (fds) {
      fsyncSync(fds.out);
      fsyncSync(fds.err);
      closeSync(fds.out);
      closeSync(fds.err);
    }
  }
}

export interface Stream {
  data: string;
  encoding: "utf-8" | "base64";
  captured_bytes: number;
  total_bytes: number;
  truncated: boolean;
  truncated_at_char_boundary: boolean;
  spool_path: string | null;
}

const strict = new TextDecoder("utf-8", { fatal: true });

/** Text when the bytes are valid UTF-8, else base64; `trimTail` drops a multibyte character cut by truncation. */
export function encodeBytes(bytes: Uint8Array, trimTail = false): { data: string; encoding: "utf-8" | "base64"; trimmed: number } {
  try {
    return { data: strict.decode(bytes), encoding: "utf-8", trimmed: 0 };
  } catch {
    if (trimTail) {
      for (let cut = 1; cut <= 3 && cut < bytes.length; cut++) {
        try {
          return { data: strict.decode(bytes.subarray(0, bytes.length - cut)), encoding: "utf-8", trimmed: cut };
        } catch {
          // keep trimming
        }
      }
    }
    return { data: Buffer.from(bytes).toString("base64"), encoding: "base64", trimmed: 0 };
  }
}

export function toStream(c: Captured, spoolPath: string | null): Stream {
  const enc = encodeBytes(c.bytes, c.truncated);
  return {
    data: enc.data,
    encoding: enc.encoding,
    captured_bytes: c.bytes.length - enc.trimmed,
    total_bytes: c.total,
    truncated: c.truncated || enc.trimmed > 0,
    truncated_at_char_boundary: enc.trimmed > 0,
    spool_path: spoolPath,
  };
}
