/**
 * Process plumbing for the ssh server: every child runs in its own session (setsid), is tracked
 * while it lives, and is stopped by signalling only its own process group.
 */
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";

const live = new Set<Subprocess>();

/** Grace the runner gives a tied child between SIGTERM and SIGKILL. */
const RUNNER_GRACE_MS = 1000;

/** The pid of the program a runner started (its only direct child), if it is running. */
export function runnerChild(runnerPid: number): number | undefined {
  try {
    const first = readFileSync(`/proc/${runnerPid}/task/${runnerPid}/children`, "utf8").trim().split(" ")[0];
    return first ? Number(first) : undefined;
  } catch {
    return undefined;
  }
}

/** A process named by pid and kernel start time, so a reused pid is never mistaken for it. */
export interface ProcessIdentity {
  pid: number;
  startTicks: string;
}

/** Field 22 (start time) and field 3 (state) of /proc/PID/stat; undefined once the pid is gone. */
function statOf(pid: number): { state: string; startTicks: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // the command name may hold spaces and parentheses: the fields start after its last ")"
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0]!, startTicks: fields[19]! };
  } catch {
    return undefined;
  }
}

/** Who `runnerPid` started, recorded while it runs so that it can still be found after the runner is gone. */
export function runnerChildIdentity(runnerPid: number): ProcessIdentity | undefined {
  const pid = runnerChild(runnerPid);
  const stat = pid === undefined ? undefined : statOf(pid);
  return pid === undefined || !stat ? undefined : { pid, startTicks: stat.startTicks };
}

function stillRunning(id: ProcessIdentity): boolean {
  const stat = statOf(id.pid);
  return stat !== undefined && stat.startTicks === id.startTicks && stat.state !== "Z" && stat.state !== "X";
}

/**
 * Stops a program whose runner died before it (a SIGKILLed runner): TERM to its group, KILL after
 * `graceMs`. The runner's parent-death TERM alone is not enough: OpenSSH 9.2's client loop checks
 * for a signal and then blocks in poll(), so a TERM landing between the two is only seen at the next
 * keepalive (ServerAliveInterval, 15 s), and an authenticated master would live on until then.
 */
export async function stopOrphan(id: ProcessIdentity, graceMs: number): Promise<void> {
  const deadline = Date.now() + graceMs;
  for (const sig of ["SIGTERM", "SIGKILL"] as const) {
    // the program made its own group (setpgid in the runner); its pid names that group
    if (!stillRunning(id)) return;
    signalGroup(id.pid, sig);
    while (sig === "SIGTERM" && Date.now() < deadline && stillRunning(id)) await Bun.sleep(20);
  }
}

export interface SpawnOptions {
  env?: Record<string, string | undefined>;
  /**
   * Path of lsm-runner: the child then runs under it, and so lives no longer than this server. The
   * runner takes a parent-death signal (a SIGKILLed server included) and then stops the child's
   * whole tree; a TERM to the runner's group does the same. Bun cannot set PR_SET_PDEATHSIG itself.
   * The program is tied to the runner in the same way, for a runner that is SIGKILLed.
   */
  runner?: string;
  stdin?: "ignore" | "pipe";
  stdout?: "ignore" | "pipe";
  stderr?: "ignore" | "pipe";
}

/** Spawns `argv` in a new session; the returned process is tracked until it exits. */
export function spawnGroup(
  argv: string[],
  opts: SpawnOptions = {},
): Subprocess<"pipe" | "ignore", "pipe" | "ignore", "pipe" | "ignore"> {
  // --program-pdeathsig: the program also takes the runner's death as SIGTERM, so a SIGKILLed runner
  // (which can clean nothing up) still cannot leave an authenticated master or an rsync behind.
  const full = opts.runner
    ? [opts.runner, "--grace-ms", String(RUNNER_GRACE_MS), "--program-pdeathsig", "--", ...argv]
    : argv;
  const proc = Bun.spawn(full, {
    env: opts.env ?? (process.env as Record<string, string>),
    stdin: opts.stdin ?? "ignore",
    stdout: opts.stdout ?? "ignore",
    stderr: opts.stderr ?? "ignore",
    detached: true,
  });
  live.add(proc);
  void proc.exited.then(() => live.delete(proc));
  return proc;
}

function signalGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    // the group is already gone
  }
}

/** SIGTERM to the child's group, SIGKILL after `graceMs`; resolves once the child is reaped. */
export async function stopGroup(proc: Subprocess, graceMs: number): Promise<void> {
  signalGroup(proc.pid, "SIGTERM");
  const done = await Promise.race([proc.exited.then(() => true), Bun.sleep(graceMs).then(() => false)]);
  // The leader may be gone while members linger; a final KILL to the group is harmless either way.
  signalGroup(proc.pid, "SIGKILL");
  if (!done) await proc.exited;
}

/**
 * A second signal during shutdown: TERM every tracked group at once and do not wait. Children under
 * lsm-runner finish their own cleanup after we are gone (the runner outlives us by its grace).
 */
export function terminateAllNow(): void {
  for (const p of live) signalGroup(p.pid, "SIGTERM");
}

/** Stops every tracked child (shutdown path). */
export async function stopAll(graceMs: number): Promise<void> {
  await Promise.all([...live].map((p) => stopGroup(p, graceMs)));
}

/**
 * Yields the chunks of a stream until it ends or `stop` aborts. A mux client hands its stdio to the
 * ControlMaster, so after the client is gone our pipes can stay open as long as the master waits for a
 * host that does not answer: `stop` lets a caller with a deadline walk away from such a pipe.
 */
async function* chunks(
  stream: ReadableStream<Uint8Array> | null | undefined,
  stop?: AbortSignal,
): AsyncGenerator<Uint8Array> {
  if (!stream) return;
  const reader = stream.getReader();
  const onStop = () => void reader.cancel().catch(() => undefined);
  if (stop?.aborted) onStop();
  else stop?.addEventListener("abort", onStop, { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    stop?.removeEventListener("abort", onStop);
    reader.releaseLock();
  }
}

/**
 * Reads a stream to its end (or `stop`) keeping only the last `limit` bytes (diagnostic tails that are never shown).
 */
export async function drainTail(
  stream: ReadableStream<Uint8Array> | null | undefined,
  limit: number,
  stop?: AbortSignal,
): Promise<Uint8Array> {
  let tail = new Uint8Array();
  for await (const chunk of chunks(stream, stop)) {
    const joined = new Uint8Array(tail.length + chunk.length);
    joined.set(tail);
    joined.set(chunk, tail.length);
    tail = joined.length > limit ? joined.slice(joined.length - limit) : joined;
  }
  return tail;
}

export interface Captured {
  bytes: Uint8Array;
  total: number;
  truncated: boolean;
  /** How many of the leading bytes the caller asked to drop were seen (see `capture`'s `skip`). */
  skipped?: number;
}

/**
 * Reads a stream to EOF (or `stop`), keeping its first `limit` bytes and counting the rest.
 * `onChunk` sees every byte (used for spool files and progress parsing) except the first `skip`,
 * which are dropped (the supervisor's start byte).
 */
export async function capture(
  stream: ReadableStream<Uint8Array> | null | undefined,
  limit: number,
  onChunk?: (chunk: Uint8Array) => void,
  stop?: AbortSignal,
  skip = 0,
): Promise<Captured> {
  const parts: Uint8Array[] = [];
  let kept = 0;
  let total = 0;
  let skipped = 0;
  for await (let chunk of chunks(stream, stop)) {
    if (skipped < skip) {
      const n = Math.min(skip - skipped, chunk.length);
      skipped += n;
      chunk = chunk.subarray(n);
      if (chunk.length === 0) continue;
    }
    total += chunk.length;
    onChunk?.(chunk);
    if (kept < limit) {
      const take = chunk.subarray(0, limit - kept);
      parts.push(take);
      kept += take.length;
    }
  }
  return { bytes: Buffer.concat(parts), total, truncated: total > kept, skipped };
}

/** Shell-quotes one word for POSIX sh. */
export function shq(word: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** Finds an executable on PATH (absolute result) or undefined. */
export function which(name: string, path = process.env.PATH ?? ""): string | undefined {
  return Bun.which(name, { PATH: path }) ?? undefined;
}
