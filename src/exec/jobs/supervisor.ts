/**
 * The job supervisor: one detached process per job attempt. It is self-contained (node built-ins
 * only) because it is extracted beside the other helpers and run by the server binary itself
 * (`BUN_BE_BUN=1 <server> <this file> <spec>`), outliving the server that started it.
 *
 * It inherits the job's liveness lease as fd 3 and keeps it until it exits, after the terminal
 * status is durable; it runs the command under the containment runner with stdout and stderr
 * merged into a log bounded to `max_log_bytes` (compacted to the tail at twice that), and forwards
 * SIGTERM/SIGINT/SIGHUP to the runner, which stops the whole process tree.
 *
 * When the command ends it also records the job's end in the registry's deferred journal, so every
 * reader (the UI, `tui`, another server after a restart) sees the job finished at once, whether or
 * not anyone polls it; the next writer of the registry folds the record in (store.ts).
 */
import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  writeSync,
} from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";

interface Spec {
  job_id: string;
  attempt: number;
  runner: string;
  grace_ms: number;
  shell: string;
  command: string;
  cwd: string;
  env: Record<string, string>;
  log: string;
  status: string;
  progress: string;
  max_log_bytes: number;
  /** The job's session and the registry's deferred journal (store/journal.ts's record format). */
  session_id?: string;
  journal_dir?: string;
}

const spec = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as Spec;
const now = () => Date.now() / 1000;

function writeAtomic(path: string, body: string): void {
  const tmp = `${dirname(path)}/.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, body);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const dfd = openSync(dirname(path), constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

let logFd = openSync(
  spec.log,
  constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_NOFOLLOW,
  0o600,
);
let logSize = fstatSync(logFd).size;
let total = 0;
let dropped = 0;
let progressDirty = false;

function compact(): void {
  const keep = spec.max_log_bytes;
  const rfd = openSync(spec.log, constants.O_RDONLY | constants.O_NOFOLLOW);
  const buf = Buffer.alloc(keep);
  let n = 0;
  try {
    while (n < keep) {
      const r = readSync(rfd, buf, n, keep - n, logSize - keep + n);
      if (r <= 0) break;
      n += r;
    }
  } finally {
    closeSync(rfd);
  }
  const tmp = `${spec.log}.compact-${process.pid}`;
  const wfd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  writeSync(wfd, buf, 0, n);
  closeSync(wfd);
  renameSync(tmp, spec.log);
  closeSync(logFd);
  logFd = openSync(spec.log, constants.O_WRONLY | constants.O_APPEND | constants.O_NOFOLLOW, 0o600);
  dropped += logSize - n;
  logSize = n;
  progressDirty = true;
}

function append(chunk: Uint8Array): void {
  let off = 0;
  while (off < chunk.length) off += writeSync(logFd, chunk, off, chunk.length - off);
  logSize += chunk.length;
  total += chunk.length;
  progressDirty = true;
  if (logSize > 2 * spec.max_log_bytes) compact();
}

function saveProgress(): void {
  if (!progressDirty) return;
  progressDirty = false;
  try {
    writeAtomic(
      spec.progress,
      JSON.stringify({ attempt: spec.attempt, output_bytes: total, dropped_bytes: dropped, updated_at: now() }),
    );
  } catch {
    // Progress is advisory; the terminal status is what matters.
  }
}

const startedAt = now();
let cancelled = false;
let child: Bun.Subprocess<"ignore", "pipe", "pipe"> | undefined;
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
  process.on(sig, () => {
    cancelled = true;
    child?.kill("SIGTERM");
  });
}

let exitCode: number | null = null;
let error: string | null = null;
try {
  child = Bun.spawn([spec.runner, "--grace-ms", String(spec.grace_ms), "--", spec.shell, "-c", spec.command], {
    cwd: spec.cwd,
    env: spec.env,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const timer = setInterval(saveProgress, 1000);
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s) append(chunk);
  };
  await Promise.all([pump(child.stdout), pump(child.stderr)]);
  const code = await child.exited;
  clearInterval(timer);
  exitCode = child.signalCode
    ? 128 + ({ SIGTERM: 15, SIGKILL: 9, SIGINT: 2, SIGHUP: 1 } as Record<string, number>)[child.signalCode]!
    : code;
  if (exitCode === 125 && !cancelled)
    error = "the containment runner could not establish or confirm containment (exit 125)";
} catch (e) {
  error = `the job could not be started: ${(e as NodeJS.ErrnoException).code ?? "spawn failed"}`;
}
closeSync(logFd);
progressDirty = true;
saveProgress();
const completedAt = now();
writeAtomic(
  spec.status,
  JSON.stringify({
    job_id: spec.job_id,
    attempt: spec.attempt,
    exit_code: exitCode,
    cancelled,
    started_at: startedAt,
    completed_at: completedAt,
    output_bytes: total,
    log_truncated: dropped > 0,
    error,
  }),
);
recordEnd();
// Exiting closes fd 3 and so releases the liveness lease, strictly after the status is durable.
process.exit(0);

/**
 * The registry's record of this attempt's end, as a deferred journal entry (the same shape the
 * server writes when the registry lock is busy). Best effort: if it cannot be written, the status
 * file and the released lease still tell any reader that the job ended.
 */
function recordEnd(): void {
  const { session_id: sessionId, journal_dir: dir } = spec;
  if (!sessionId || !dir || !/^[A-Za-z0-9]{8}$/.test(sessionId)) return;
  try {
    const status = cancelled ? "stopped" : exitCode === 0 ? "succeeded" : "failed";
    const id = randomBytes(12).toString("hex");
    const truncated = dropped > 0;
    const patch = {
      status,
      exit_code: exitCode,
      completed_at: completedAt,
      error,
      output_bytes: total,
      log_truncated: truncated,
    };
    const data = { attempt: spec.attempt, patch };
    const record = { id, created_at: now(), session_id: sessionId, job_id: spec.job_id, op: "complete", data };
    const body = JSON.stringify(record);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const stamp = String(Date.now() * 1000 + (process.pid % 1000)).padStart(16, "0");
    writeAtomic(join(dir, `${stamp}-000000-${id}.json`), body);
  } catch {
    // The status file already holds the end; reconciliation reads it from there.
  }
}

/** The path of this script (an embedded asset path when imported with `{ type: "file" }`). */
export default import.meta.path;
