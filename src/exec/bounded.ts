import { log } from "../core/log.ts";
import { ToolError } from "../core/errors.ts";
import { cgroupPopulated, killCgroupEventually } from "./cgroup.ts";
import { childEnv } from "./env.ts";
import { excerpt, splitBudget, TailBuffer } from "./output.ts";
import { type ContainedProcess, currentRunnerServer, type OutputSink, runnerServer } from "./runner-server.ts";
import type { Semaphore } from "./semaphore.ts";

/** Time the runner gives descendants between SIGTERM and SIGKILL. */
export const KILL_GRACE_MS = 1500;
/**
 * Part of the cleanup budget kept back from the runner, so that its verdict (confirmed, or the
 * "unconfirmed" line) reaches us before we must return.
 */
const VERDICT_MARGIN_MS = 1000;
/** After the runner has exited, how long buffered output may take to drain before we stop reading. */
const DRAIN_AFTER_EXIT_MS = 1000;
/** Exit code the runner uses when containment cannot be established or confirmed. */
export const CONTAINMENT_FAILED_EXIT = 125;

/** The runner's own cleanup budget, derived from the one cleanup setting. */
export function runnerCleanupMs(cleanupBudgetMs: number): number {
  return Math.max(KILL_GRACE_MS + 500, cleanupBudgetMs - VERDICT_MARGIN_MS);
}

export interface BoundedRequest {
  runner: string;
  shell: string;
  command: string;
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  maxOutputBytes: number;
  semaphore: Semaphore;
  /** Time from the deadline (or cancellation) by which the tree must be confirmed gone. */
  cleanupBudgetMs: number;
  /** The command's own cgroup (created by the runner), and its pids.max (0 = none). */
  cgroup?: { path: string; pidsMax: number };
  signal?: AbortSignal;
  /** Sees every output chunk as it arrives (progress reports); must not throw. */
  onOutput?: (chunk: Uint8Array) => void;
}

/**
 * confirmed: the runner proved the tree empty; unavailable: containment could not be set up and
 * the command never ran; unconfirmed: the tree was not proved gone within the cleanup budget.
 */
export type Containment = "confirmed" | "unavailable" | "unconfirmed";

export interface BoundedResult {
  exit_code: number | null;
  timed_out: boolean;
  cancelled: boolean;
  duration_ms: number;
  stdout: string;
  stderr: string;
  truncated: boolean;
  stdout_bytes: number;
  stderr_bytes: number;
  stdout_lossy: boolean;
  stderr_lossy: boolean;
  containment: Containment;
  /**
   * Set when the runner supervising the command was killed or stopped from outside (or its server
   * died or stopped by itself) before the command ended: its exit status says nothing about the
   * command, which may still have been running.
   */
  runner_interrupted?: string;
}

/** Live contained commands, so shutdown can stop them (their runner then reaps their trees). */
const live = new Set<ContainedProcess>();

/**
 * Runners whose cleanup outlived the budget. They are never killed (that would orphan the tree):
 * each keeps stopping its tree, and we log when it finishes. A group whose runner died anyway is
 * killed from here until empty.
 */
const leftovers = new Map<number, { command: string; cgroup?: string; since: number }>();

function trackLeftover(proc: ContainedProcess, command: string, cgroup: string | undefined): void {
  const pid = proc.pid;
  leftovers.set(pid, { command, cgroup, since: Date.now() });
  log.warn(`containment unconfirmed for runner ${pid}; its tree is still being stopped in the background`);
  void proc.exited.then(() => {
    if (proc.signalCode === null) {
      const since = leftovers.get(pid)?.since ?? Date.now();
      leftovers.delete(pid);
      log.info(`runner ${pid} finished stopping its tree ${Date.now() - since} ms after the cleanup budget ran out`);
      return;
    }
    // The runner was killed from outside: only its group can still reach the tree.
    if (!cgroup) {
      leftovers.delete(pid);
      log.error(
        `runner ${pid} was killed before confirming cleanup; its remaining processes cannot be tracked ` +
          `without the cgroup layer`,
      );
      return;
    }
    retryGroup(pid, cgroup);
  });
}

function retryGroup(pid: number, cgroup: string): void {
  killCgroupEventually(cgroup, () => {
    leftovers.delete(pid);
    log.info(`leftover group ${cgroup} is empty and removed`);
  });
}

/** Asks every runner to stop its tree and waits for them, at most `limitMs`. */
export function stopAllBounded(limitMs = 6000): Promise<void> {
  const waits = [...live].map((p) => {
    p.kill();
    return p.exited;
  });
  let timer: Timer | undefined;
  const limit = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, limitMs);
  });
  const done = Promise.allSettled(waits).then(() => currentRunnerServer()?.stop());
  return Promise.race([done, limit]).finally(() => clearTimeout(timer));
}

/** Reads a stream into `sink` until it ends or `stop` is called. */
function drain(
  stream: ReadableStream<Uint8Array>,
  sink: (chunk: Uint8Array) => void,
): { done: Promise<void>; stop: () => void } {
  const reader = stream.getReader();
  const done = (async () => {
    try {
      for (;;) {
        const { done: end, value } = await reader.read();
        if (end) return;
        sink(value);
      }
    } catch {
      // Cancelled by stop(): the rest of the output belongs to processes we no longer wait for.
    }
  })();
  return { done, stop: () => void reader.cancel().catch(() => undefined) };
}

/** The command environment when a call sets no variable: built once, frozen, so its encoding is kept. */
let plainEnv: Readonly<Record<string, string>> | undefined;

function commandEnv(overrides: Record<string, string>): Record<string, string> {
  if (Object.keys(overrides).length > 0) return childEnv(overrides);
  plainEnv ??= Object.freeze(childEnv({}));
  return plainEnv as Record<string, string>;
}

/** The fallback: a fresh runner process for this one command (two process starts). */
function spawnPerCall(runner: string, args: string[], req: BoundedRequest, sink: OutputSink): ContainedProcess {
  const proc = Bun.spawn([runner, ...args], {
    cwd: req.cwd,
    env: childEnv(req.env),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const readers = [drain(proc.stdout, (c) => sink(0, c)), drain(proc.stderr, (c) => sink(1, c))];
  return {
    pid: proc.pid,
    exited: proc.exited,
    get signalCode() {
      return proc.signalCode;
    },
    kill: () => proc.kill("SIGTERM"),
    outputDone: Promise.all(readers.map((r) => r.done)).then(() => undefined),
    stopOutput: () => {
      for (const r of readers) r.stop();
    },
  };
}

/**
 * Runs one command under the containment runner: separate, concurrently drained and bounded stdout
 * and stderr; on timeout or cancellation the runner terminates the whole process tree.
 */
export async function runBounded(req: BoundedRequest): Promise<BoundedResult> {
  const started = Date.now();
  const deadline = started + req.timeoutMs;
  const release = await req.semaphore.acquire(req.signal, deadline);
  try {
    return await spawnContained(req, started, deadline);
  } finally {
    release();
  }
}

function delay(ms: number): { promise: Promise<"late">; cancel: () => void } {
  let timer: Timer | undefined;
  const promise = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), Math.max(0, ms));
  });
  return { promise, cancel: () => clearTimeout(timer) };
}

async function spawnContained(req: BoundedRequest, started: number, deadline: number): Promise<BoundedResult> {
  // The runner also holds the deadline: it wakes by itself (with a raised priority where allowed)
  // instead of waiting for our timer, which a CPU-busy tree can delay for seconds.
  const args = [
    "--grace-ms",
    String(KILL_GRACE_MS),
    "--cleanup-ms",
    String(runnerCleanupMs(req.cleanupBudgetMs)),
    "--timeout-ms",
    String(Math.max(0, deadline - Date.now())),
    "--persist",
  ];
  if (req.cgroup) {
    args.push("--cgroup", req.cgroup.path);
    if (req.cgroup.pidsMax > 0) args.push("--pids-max", String(req.cgroup.pidsMax));
  }
  args.push("--", req.shell, "-c", req.command);
  const out = new TailBuffer(req.maxOutputBytes);
  const err = new TailBuffer(req.maxOutputBytes);
  const sink: OutputSink = (stream, chunk) => {
    (stream === 0 ? out : err).push(chunk);
    req.onOutput?.(chunk);
  };
  // One fork in the long-lived runner when it is up; a runner per call when it is not.
  const server = await runnerServer(req.runner);
  let proc: ContainedProcess;
  try {
    proc = server?.run(args, req.cwd, commandEnv(req.env), sink) ?? spawnPerCall(req.runner, args, req, sink);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT")
      throw new ToolError("path_not_found", "the working directory vanished before the command started");
    throw new ToolError("spawn_failed", "could not start the command runner");
  }
  live.add(proc);

  let timedOut = false;
  let cancelled = false;
  // The call returns by its deadline plus the cleanup budget at the latest, or earlier if it was
  // cancelled earlier; pipes held open by leftovers never hold it longer.
  let returnBy = deadline + req.cleanupBudgetMs;
  let cap = delay(returnBy - Date.now());
  const stop = () => {
    proc.kill();
    const by = Date.now() + req.cleanupBudgetMs;
    if (by < returnBy) {
      returnBy = by;
      cap.cancel();
      cap = delay(returnBy - Date.now());
    }
  };
  const timer = setTimeout(
    () => {
      timedOut = true;
      stop();
    },
    Math.max(0, deadline - Date.now()),
  );
  const onAbort = () => {
    cancelled = true;
    stop();
  };
  req.signal?.addEventListener("abort", onAbort, { once: true });
  if (req.signal?.aborted) onAbort();

  // The cap promise is replaced when a cancellation moves it earlier, so race on a fresh read.
  const capReached = async (): Promise<"late"> => {
    for (;;) {
      const current = cap;
      await current.promise;
      if (current === cap) return "late";
    }
  };
  let exitCode: number | "late";
  try {
    exitCode = await Promise.race([proc.exited, capReached()]);
    clearTimeout(timer);
    // The runner stopped the command at the deadline by itself before our (delayed) timer ran.
    if (exitCode === 128 + 15 && !cancelled && Date.now() >= deadline) timedOut = true;
    if (exitCode !== "late") {
      // The tree is gone; what is left in the pipes drains at once unless an outsider holds them.
      const window = delay(Math.min(DRAIN_AFTER_EXIT_MS, returnBy - Date.now()));
      await Promise.race([proc.outputDone, window.promise]);
      window.cancel();
    }
  } finally {
    clearTimeout(timer);
    cap.cancel();
    req.signal?.removeEventListener("abort", onAbort);
    proc.stopOutput();
    live.delete(proc);
  }

  const [outN, errN] = splitBudget(
    req.maxOutputBytes,
    Math.min(out.total, req.maxOutputBytes),
    Math.min(err.total, req.maxOutputBytes),
  );
  if (
    exitCode === CONTAINMENT_FAILED_EXIT &&
    err.total < 4096 &&
    excerpt(err, err.total).text.startsWith("lsm-runner: no working directory")
  ) {
    throw new ToolError("path_not_found", "the working directory vanished before the command started");
  }
  const stdout = excerpt(out, outN);
  const stderr = excerpt(err, errN);
  let containment: Containment = "confirmed";
  if (exitCode === "late") {
    containment = "unconfirmed";
    trackLeftover(proc, req.command, req.cgroup?.path);
  } else if (proc.signalCode !== null) {
    // Someone else killed the runner: nothing proves the tree is gone.
    containment = "unconfirmed";
    if (req.cgroup && cgroupPopulated(req.cgroup.path)) trackLeftover(proc, req.command, req.cgroup.path);
  } else if (exitCode === CONTAINMENT_FAILED_EXIT) {
    if (stderr.text.includes("lsm-runner: containment unavailable")) containment = "unavailable";
    else if (stderr.text.includes("lsm-runner: containment cleanup")) containment = "unconfirmed";
  }
  const interrupted = exitCode !== "late" && proc.signalCode !== null ? String(proc.signalCode) : undefined;
  return {
    ...(interrupted ? { runner_interrupted: interrupted } : {}),
    exit_code: exitCode === "late" || proc.signalCode !== null || containment !== "confirmed" ? null : exitCode,
    timed_out: timedOut,
    cancelled,
    duration_ms: Date.now() - started,
    stdout: stdout.text,
    stderr: stderr.text,
    truncated: outN < out.total || errN < err.total,
    stdout_bytes: out.total,
    stderr_bytes: err.total,
    stdout_lossy: stdout.lossy,
    stderr_lossy: stderr.lossy,
    containment,
  };
}
