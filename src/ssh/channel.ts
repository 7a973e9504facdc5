/**
 * Supervised remote commands over the mux. The channel's remote program is one fixed `/bin/sh -c`
 * supervisor; the script travels on the channel's stdin as `<length>\n<script><end marker>\n` and is
 * read completely (the marker proves it is whole) before anything runs. The command itself gets
 * /dev/null as stdin, so it can never consume the script, and the channel's stdin then only serves
 * as a lifeline: when it reaches EOF (timeout, cancel, disconnect, lost transport) everything the
 * command started is stopped, whatever group or session it moved to (`SWEEP_FUNCTIONS`). No
 * temporary files are created on the remote host.
 */
import { closeSync, constants, fsyncSync, openSync, writeSync } from "node:fs";
import { randomBytes } from "node:crypto";
import type { Subprocess } from "bun";
import { ToolError } from "../core/errors.ts";
import type { Master } from "./master.ts";
import { capture, type Captured, shq, spawnGroup, stopGroup } from "./proc.ts";

/** Local grace between SIGTERM and SIGKILL for a channel's mux client (a local relay: it exits at once). */
const COMMAND_STOP_GRACE_MS = 1000;
/**
 * How long a stopped channel's output may still drain. The mux client passed its stdio to the
 * master, which keeps our pipes open until the host confirms the close; on a stalled network that
 * is never, so after this the call returns with what it has (the deadline is ours, not the host's).
 */
const STREAM_DRAIN_GRACE_MS = 1000;

/**
 * The supervisor's first output byte on stdout, dropped locally: a channel that exits 255 without it
 * never ran the supervisor, so sshd refused the channel (or the transport failed), and a command's
 * own `exit 255` is never mistaken for that.
 */
export const SUPERVISOR_STARTED = "+";

/** Scripts up to this many bytes are read with the shell's own `read` (no extra process). */
const INLINE_READ_LIMIT = 4096;

/**
 * The command's shell gets its script in the environment variable `LSM_SSH_SCRIPT` (and drops it at
 * once), never as an argument: /proc/PID/cmdline is world-readable on the remote host, environ only
 * to the owner and root. Linux refuses one environment string of 128 KiB or more, so a script over
 * this many bytes reaches that shell through a pipe and `cat` instead.
 */
export const ENV_SCRIPT_LIMIT = 100_000;

/** The `sh -c` program that runs the script handed over in `LSM_SSH_SCRIPT`. */
export const ENV_SCRIPT_RUNNER = 'eval "unset -v LSM_SSH_SCRIPT; $LSM_SSH_SCRIPT"';

/** The `sh -c` program that reads a large script from stdin, then runs it with stdin /dev/null. */
export const PIPED_SCRIPT_RUNNER = 't=$(cat) && exec </dev/null && eval "unset -v t; $t"';

/** The environment variable that marks every process a command starts (its value is per call). */
export const CALL_TAG_NAME = "LSM_SSH_CALL";

/**
 * Remote shell functions (POSIX sh, also run by root bash, see sudo.ts) that stop everything a
 * command started. A process group or session is no fence: `set -m`, `setsid`, `nohup … &` and a
 * double fork all leave it, and the remote login user has no subreaper or cgroup to hold them. So
 * the command runs with `$1` (`NAME=value`, random per call) in its environment, which every fork
 * and exec keeps unless the environment is scrubbed, and a process counts as the command's when it
 * carries that tag (`grep -l` over /proc/PID/environ) or descends from one that does (PPid from
 * /proc/PID/status, zombies skipped), which also catches `env -i` children while their parent lives.
 *
 * `lsm_freeze` SIGSTOPs what it finds and scans again until a scan finds nothing new (a stopped
 * process cannot fork, so nothing slips out between scan and signal, and stopped pids stay valid);
 * `lsm_sweep` freezes, TERMs and continues the lot, waits a second, then freezes and KILLs until two
 * scans in a row find nothing (one empty `/proc` readdir is not proof) or 30 rounds pass. With
 * nothing tagged it returns after two greps, or after one with `quick` (a command that ended by
 * itself: its leftovers, if any, are found by that first scan; nothing is racing to escape). grep
 * and sleep are also looked for in /usr/bin and /bin: an account's PATH may lack them. They only set
 * `lsm_*` variables that the scripts around them never use (root bash keeps `lsm_c`, `lsm_d`,
 * `lsm_g`, `lsm_p`, `lsm_r` and `lsm_w`).
 */
export const SWEEP_FUNCTIONS = `lsm_scan() {
  lsm_s=" "
  for lsm_f in $(PATH="$PATH:/usr/bin:/bin" grep -lF -e "$1" /proc/[0-9]*/environ 2>/dev/null); do
    lsm_f=\${lsm_f#/proc/}; lsm_s="$lsm_s\${lsm_f%/environ} "
  done
  [ "$lsm_s" = " " ] && return 0
  lsm_t=
  for lsm_f in /proc/[0-9]*/status; do
    lsm_z=; lsm_q=
    { while read -r lsm_k lsm_v lsm_o; do
        case $lsm_k in State:) lsm_z=$lsm_v;; PPid:) lsm_q=$lsm_v; break;; esac
      done; } 2>/dev/null <"$lsm_f"
    case $lsm_z in Z|X|'') continue;; esac
    lsm_f=\${lsm_f#/proc/}; lsm_t="$lsm_t \${lsm_f%/status}:$lsm_q"
  done
  lsm_m=1
  while [ "$lsm_m" = 1 ]; do
    lsm_m=0
    for lsm_e in $lsm_t; do
      case $lsm_s in *" \${lsm_e%:*} "*) continue;; esac
      case $lsm_s in *" \${lsm_e#*:} "*) lsm_s="$lsm_s\${lsm_e%:*} "; lsm_m=1;; esac
    done
  done
}
lsm_freeze() {
  lsm_a=" "; lsm_i=0
  while [ "$lsm_i" -lt 30 ]; do
    lsm_scan "$1"; lsm_n=
    for lsm_e in $lsm_s; do case $lsm_a in *" $lsm_e "*) ;; *) lsm_n="$lsm_n $lsm_e";; esac; done
    [ -z "$lsm_n" ] && return 0
    kill -s STOP $lsm_n 2>/dev/null; lsm_a="$lsm_a\${lsm_n# } "; lsm_i=$((lsm_i+1))
  done
}
lsm_sweep() {
  lsm_freeze "$1"
  [ "$lsm_a" = " " ] && [ "$2" = quick ] && return 0
  if [ "$lsm_a" != " " ]; then
    kill -s TERM $lsm_a 2>/dev/null; kill -s CONT $lsm_a 2>/dev/null; PATH="$PATH:/usr/bin:/bin" sleep 1
  fi
  lsm_y=0; lsm_j=0
  while [ "$lsm_j" -lt 30 ]; do
    lsm_freeze "$1"
    if [ "$lsm_a" = " " ]; then
      lsm_y=$((lsm_y+1)); [ "$lsm_y" -ge 2 ] && return 0
    else
      lsm_y=0; kill -s KILL $lsm_a 2>/dev/null
    fi
    lsm_j=$((lsm_j+1))
  done
  return 1
}`;

/**
 * The remote supervisor. `$1` is the kind (sh | sudo), `$2` the end marker of this call, which is
 * also the value of the call's tag (`LSM_SSH_CALL`) in the command's environment.
 *
 * Exit statuses of the supervisor itself (before the command ran): 70 no length line, 71 bad
 * length, 74 the script arrived incomplete. 125 comes from the `cwd` line of the script.
 *
 * Fast path (the usual case: the login shell exec'd us, so we lead the channel's process group,
 * which sshd created for this channel alone): the command runs in a forked subshell that exports
 * the tag and execs `/bin/sh` with the script (sudo: the fixed sudo program fed by a pipe; its root shell first
 * reads `lsm_p=<our pid>` and then supervises its own tree with its own tag, see sudo.ts), and a
 * forked watcher blocks on the channel. When the command ends, TERM goes to the whole group while
 * we ignore it, and `lsm_sweep` ends whatever else carries the tag (`nohup`, `setsid`, `set -m`,
 * double forks); when the channel ends first (timeout, cancel, disconnect, lost transport), the
 * watcher TERMs the group, sweeps, and KILLs the group.
 * Fallback (we do not lead our group, e.g. a login shell that forks): the command gets its own
 * group through `setsid` and reads the script from a pipe before running it with stdin /dev/null;
 * the same sweeps follow.
 */
export const SUPERVISOR = `printf '${SUPERVISOR_STARTED}'
exec 3<&0
IFS= read -r n || exit 70
case $n in ''|*[!0-9]*) exit 71;; esac
t=
if [ "$n" -le ${INLINE_READ_LIMIT} ]; then
  while :; do
    IFS= read -r l || exit 74
    [ "$l" = "$2" ] && break
    t="$t$l
"
  done
else
  t=$(head -c "$n") || exit 74
  l=\${t%"$2"}
  [ "$l" != "$t" ] || exit 74
  t=$l
fi
${SWEEP_FUNCTIONS}
g=${CALL_TAG_NAME}=$2
trap 'exit 129' HUP INT TERM
if kill -s 0 -- -$$ 2>/dev/null; then
  if [ "$1" = sudo ]; then
    ( trap - HUP INT TERM
      printf 'lsm_p=%s\\n%s' "$$" "$t" | LC_ALL=C sudo -n -k -- /bin/bash --noprofile --norc -s ) </dev/null 3<&- &
  else
    if [ "$n" -le ${ENV_SCRIPT_LIMIT} ]; then
      ( trap - HUP INT TERM; ${CALL_TAG_NAME}=$2; LSM_SSH_SCRIPT=$t; export ${CALL_TAG_NAME} LSM_SSH_SCRIPT
        exec /bin/sh -c ${shq(ENV_SCRIPT_RUNNER)} lsm-ssh ) </dev/null 3<&- &
    else
      printf '%s' "$t" | ( trap - HUP INT TERM; ${CALL_TAG_NAME}=$2; export ${CALL_TAG_NAME}
        exec /bin/sh -c ${shq(PIPED_SCRIPT_RUNNER)} lsm-ssh ) 3<&- &
    fi
  fi
  c=$!
  { while IFS= read -r _; do :; done; trap '' TERM
    kill -s TERM 0; lsm_sweep "$g"; kill -s KILL 0; } <&3 >/dev/null 2>&1 &
  wait "$c"
  r=$?
  trap '' TERM
  kill -s TERM 0
  lsm_sweep "$g" quick >/dev/null 2>&1
  exit "$r"
fi
if [ "$1" = sudo ]; then
  printf 'lsm_p=%s\\n%s' "$$" "$t" | LC_ALL=C setsid sudo -n -k -- /bin/bash --noprofile --norc -s 3<&- &
else
  printf '%s' "$t" | ${CALL_TAG_NAME}=$2 setsid /bin/sh -c ${shq(PIPED_SCRIPT_RUNNER)} lsm-ssh 3<&- &
fi
c=$!
trap 'kill -s KILL -- -"$c" 2>/dev/null; lsm_sweep "$g" >/dev/null 2>&1; exit 129' HUP INT TERM
{ while IFS= read -r _; do :; done
  kill -s TERM -- -"$c"; lsm_sweep "$g"; kill -s KILL -- -"$c"; } <&3 >/dev/null 2>&1 &
w=$!
wait "$c"
r=$?
kill -s TERM "$w" 2>/dev/null
kill -s TERM -- -"$c" 2>/dev/null
lsm_sweep "$g" quick >/dev/null 2>&1
exit "$r"`;

/** The bytes written to the channel's stdin for `script` (which must end with a newline). */
export function framedScript(script: string, marker: string): Buffer {
  const body = Buffer.from(`${script}${marker}\n`);
  return Buffer.concat([Buffer.from(`${body.length}\n`), body]);
}

/** The remote program string of a channel (exported for the unit tests of the supervisor). */
export function supervisorProgram(kind: ChannelKind, marker: string): string {
  return `/bin/sh -c ${shq(SUPERVISOR)} lsm-ssh ${kind} ${marker}`;
}

export function newMarker(): string {
  return `__LSM_SSH_END_${randomBytes(16).toString("hex")}__`;
}

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

/** What remote operations need of a session: its master, its open channels and a busy count. */
export interface Remote {
  readonly master: Master;
  readonly channels: ChannelSet;
  activeCommands: number;
}

/** Tracks open channels so a disconnect can end them with a clear outcome. */
export class ChannelSet {
  private readonly procs = new Map<Subprocess, () => void>();
  disconnected = false;

  get size(): number {
    return this.procs.size;
  }

  /** `end` stops the channel's mux client and lets its reader walk away from the pipes. */
  add(p: Subprocess, end: () => void): void {
    this.procs.set(p, end);
  }

  delete(p: Subprocess): void {
    this.procs.delete(p);
  }

  async stopAll(): Promise<void> {
    this.disconnected = true;
    const open = [...this.procs];
    for (const [, end] of open) end();
    await Promise.all(open.map(([p]) => p.exited));
  }
}

function openSpool(path: string): number {
  return openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
}

/** Runs one script on the remote through the master's socket. */
export async function runChannel(master: Master, channels: ChannelSet, req: ChannelRequest): Promise<ChannelResult> {
  await master.ensureReady();
  if (req.signal?.aborted) throw new ToolError("cancelled", "the request was cancelled");
  const marker = newMarker();
  const program = supervisorProgram(req.kind, marker);
  const framed = framedScript(req.script.endsWith("\n") ? req.script : `${req.script}\n`, marker);
  const started = performance.now();
  const fds = req.spool ? { out: openSpool(req.spool.stdout), err: openSpool(req.spool.stderr) } : undefined;
  let proc: Subprocess<"pipe", "pipe", "pipe">;
  try {
    proc = spawnGroup(master.channelArgv(program), { stdin: "pipe", stdout: "pipe", stderr: "pipe" }) as Subprocess<
      "pipe",
      "pipe",
      "pipe"
    >;
  } catch {
    if (fds) {
      closeSync(fds.out);
      closeSync(fds.err);
    }
    throw new ToolError("connection_lost", "cannot start an SSH channel");
  }
  const abandon = new AbortController();
  let ending = false;
  const end = () => {
    if (ending) return;
    ending = true;
    void stopGroup(proc, COMMAND_STOP_GRACE_MS);
    setTimeout(() => abandon.abort(), STREAM_DRAIN_GRACE_MS);
  };
  channels.add(proc, end);
  try {
    proc.stdin.write(framed);
    void Promise.resolve(proc.stdin.flush()).catch(() => undefined);
  } catch {
    // the channel already failed; its exit status tells the story
  }
  let timedOut = false;
  let cancelled = false;
  const timer = setTimeout(() => {
    timedOut = true;
    end();
  }, req.timeoutMs);
  const onAbort = () => {
    cancelled = true;
    end();
  };
  req.signal?.addEventListener("abort", onAbort, { once: true });
  // A spool that cannot be written (disk full) stops being written; the call then fails after the
  // command ended, instead of the capture failing under a command that keeps running.
  let spoolError: string | undefined;
  const sink = (fd: number | undefined) =>
    fd === undefined
      ? undefined
      : (chunk: Uint8Array) => {
          if (spoolError !== undefined) return;
          try {
            writeSync(fd, chunk);
          } catch (e) {
            spoolError = (e as NodeJS.ErrnoException).code ?? "error";
          }
        };
  try {
    const [stdout, stderr] = await Promise.all([
      capture(proc.stdout, req.maxBytes, sink(fds?.out), abandon.signal, 1),
      capture(proc.stderr, req.maxBytes, sink(fds?.err), abandon.signal),
    ]);
    await proc.exited;
    try {
      void Promise.resolve(proc.stdin.end()).catch(() => undefined);
    } catch {
      // already closed
    }
    const durationMs = Math.round(performance.now() - started);
    if (channels.disconnected) throw new ToolError("connection_lost", "SSH connection was explicitly disconnected");
    if (cancelled) throw new ToolError("cancelled", "the request was cancelled");
    if (spoolError === "ENOSPC" || spoolError === "EDQUOT")
      throw new ToolError(
        "local_disk_full",
        "the local disk filled up while spooling the output; the command ran, but its spool files are incomplete",
      );
    if (spoolError !== undefined)
      throw new ToolError(
        "spool_write_failed",
        `the output spool could not be written (${spoolError}); the command ran`,
      );
    const code = timedOut ? null : proc.exitCode;
    if (code === 255) {
      await master.ensureReady(true);
      if (stdout.skipped !== 1)
        throw new ToolError(
          "channel_refused",
          "the SSH server refused a new session channel (for example its MaxSessions limit); try again when " +
            "other calls have finished",
        );
    }
    return {
      code,
      signal: proc.signalCode === null ? null : String(proc.signalCode),
      timedOut,
      stdout,
      stderr,
      durationMs,
    };
  } finally {
    clearTimeout(timer);
    req.signal?.removeEventListener("abort", onAbort);
    channels.delete(proc);
    if (fds) {
      for (const fd of [fds.out, fds.err]) {
        try {
          fsyncSync(fd);
        } catch {
          // a full disk: the error is reported above
        }
        closeSync(fd);
      }
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

// ignoreBOM: a leading byte-order mark is data and must survive; a default decoder strips it silently.
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Response bytes one UTF-16 unit of text costs on the wire: the result is sent twice, as
 * structuredContent (JSON-escaped once) and as the compact JSON text (escaped twice). Printable
 * ASCII costs 2, `"` and `\\` 6 (`\"` then `\\\"`), tab/CR/LF 5 and ESC 13; anything else is sent
 * raw, twice its UTF-8 bytes (4 for U+0080..U+07FF and per surrogate half, 6 up to U+FFFF), so the
 * sum is the exact response size. Other control characters return -1: they make the text binary.
 */
function wireCost(code: number): number {
  if (code >= 0x80) return code < 0x800 || (code >= 0xd800 && code <= 0xdfff) ? 4 : 6;
  if (code >= 0x20 && code !== 0x7f) return code === 0x22 || code === 0x5c ? 6 : 2;
  if (code === 0x09 || code === 0x0a || code === 0x0d) return 5;
  if (code === 0x1b) return 13;
  return -1;
}

/** Text may cost at most this many response bytes per byte; base64 costs 8/3 (4/3, twice). */
const MAX_TEXT_WIRE_COST = 3;
/** Short texts ("0\n") stay text whatever their mix: a few escapes cannot overflow anything. */
const TEXT_WIRE_SLACK = 256;

/**
 * True when `text` (decoded from `byteLength` bytes) has no binary control characters and stays within the wire budget.
 */
function fitsAsText(text: string, byteLength: number): boolean {
  let cost = 0;
  for (let i = 0; i < text.length; i++) {
    const c = wireCost(text.charCodeAt(i));
    if (c < 0) return false;
    cost += c;
  }
  return cost <= MAX_TEXT_WIRE_COST * byteLength + TEXT_WIRE_SLACK;
}

/**
 * Text when the bytes are valid UTF-8 without control bytes other than tab, CR, LF and ESC, and
 * escaping keeps the response within ~3 bytes per byte; else base64 (so a megabyte of NULs is never
 * escaped into many megabytes). `trimTail` drops a multibyte character cut by truncation.
 */
export function encodeBytes(
  bytes: Uint8Array,
  trimTail = false,
): { data: string; encoding: "utf-8" | "base64"; trimmed: number } {
  const asText = (cut: number) => {
    const text = strict.decode(bytes.subarray(0, bytes.length - cut));
    return fitsAsText(text, bytes.length - cut) ? { data: text, encoding: "utf-8" as const, trimmed: cut } : undefined;
  };
  const base64 = { data: Buffer.from(bytes).toString("base64"), encoding: "base64" as const, trimmed: 0 };
  try {
    return asText(0) ?? base64;
  } catch {
    if (trimTail) {
      for (let cut = 1; cut <= 3 && cut < bytes.length; cut++) {
        try {
          return asText(cut) ?? base64;
        } catch {
          // keep trimming
        }
      }
    }
    return base64;
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
