import { ToolError } from "../core/errors.ts";
import { childEnv } from "./env.ts";
import { excerpt, splitBudget, TailBuffer } from "./output.ts";
import type { Semaphore } from "./semaphore.ts";

/** Time the runner gives descendants between SIGTERM and SIGKILL. */
export const KILL_GRACE_MS = 1500;
/** Extra time before we SIGKILL the runner itself if its own cleanup stalls. */
const RUNNER_BACKSTOP_MS = 4000;
/** Exit code the runner uses when containment cannot be established or confirmed. */
export const CONTAINMENT_FAILED_EXIT = 125;

export interface BoundedRequest {
  runner: string;
  shell: string;
  command: string;
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  maxOutputBytes: number;
  semaphore: Semaphore;
  signal?: AbortSignal;
  /** Sees every output chunk as it arrives (progress reports); must not throw. */
  onOutput?: (chunk: Uint8Array) => void;
}

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
  containment_failed: boolean;
}

/** Live runner processes, so shutdown can stop them (the runner then reaps their trees). */
const live = new Set<Bun.Subprocess>();

export function stopAllBounded(): Promise<void> {
  const waits = [...live].map((p) => {
    p.kill("SIGTERM");
    return p.exited;
  });
  return Promise.allSettled(waits).then(() => undefined);
}

async function drain(stream: ReadableStream<Uint8Array>, into: TailBuffer, onOutput?: (chunk: Uint8Array) => void): Promise<void> {
  for await (const chunk of stream) {
    into.push(chunk);
    onOutput?.(chunk);
  }
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

async function spawnContained(req: BoundedRequest, started: number, deadline: number): Promise<BoundedResult> {
  let proc: Bun.Subprocess<"ignore", "pipe", "pipe">;
  try {
    proc = Bun.spawn([req.runner, "--grace-ms", String(KILL_GRACE_MS), "--", req.shell, "-c", req.command], {
      cwd: req.cwd,
      env: childEnv(req.env),
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new ToolError("path_not_found", "the working directory vanished before the command started");
    throw new ToolError("spawn_failed", "could not start the command runner");
  }
  live.add(proc);
  const out = new TailBuffer(req.maxOutputBytes);
  const err = new TailBuffer(req.maxOutputBytes);
  const draining = Promise.all([drain(proc.stdout, out, req.onOutput), drain(proc.stderr, err, req.onOutput)]);

  let timedOut = false;
  let cancelled = false;
  let backstop: Timer | undefined;
  const stop = () => {
    proc.kill("SIGTERM");
    backstop ??= setTimeout(() => proc.kill("SIGKILL"), KILL_GRACE_MS + RUNNER_BACKSTOP_MS);
  };
  const timer = setTimeout(() => {
    timedOut = true;
    stop();
  }, Math.max(0, deadline - Date.now()));
  const onAbort = () => {
    cancelled = true;
    stop();
  };
  req.signal?.addEventListener("abort", onAbort, { once: true });
  if (req.signal?.aborted) onAbort();

  let exitCode: number;
  try {
    exitCode = await proc.exited;
    await draining;
  } finally {
    clearTimeout(timer);
    clearTimeout(backstop);
    req.signal?.removeEventListener("abort", onAbort);
    live.delete(proc);
  }

  const [outN, errN] = splitBudget(req.maxOutputBytes, Math.min(out.total, req.maxOutputBytes), Math.min(err.total, req.maxOutputBytes));
  const stdout = excerpt(out, outN);
  const stderr = excerpt(err, errN);
  const killedBySignal = proc.signalCode !== null;
  return {
    // A runner we had to SIGKILL reports no exit code of its own.
    exit_code: killedBySignal ? null : exitCode,
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
    containment_failed: exitCode === CONTAINMENT_FAILED_EXIT && stderr.text.includes("lsm-runner: containment"),
  };
}
