import { dlopen, FFIType, read } from "bun:ffi";
import { closeSync, constants, fstatSync, openSync } from "node:fs";
import { ToolError } from "../core/errors.ts";

const LOCK_SH = 1;
const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;
const EWOULDBLOCK = 11;

interface Libc {
  flock: (fd: number, op: number) => number;
  errno: () => number;
}
let libc: Libc | undefined;
function sys(): Libc {
  if (!libc) {
    const lib = dlopen("libc.so.6", {
      flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
      __errno_location: { args: [], returns: FFIType.ptr },
    });
    libc = {
      flock: lib.symbols.flock,
      errno: () => {
        const p = lib.symbols.__errno_location();
        return p === null ? -1 : read.i32(p, 0);
      },
    };
  }
  return libc;
}
function flockFn(): (fd: number, op: number) => number {
  return sys().flock;
}

export type LockMode = "exclusive" | "shared";

/** Outcome of one non-blocking attempt: taken, held by someone else, or not decidable (I/O trouble). */
export type LockAttempt =
  | { status: "acquired"; lock: FileLock }
  | { status: "busy" }
  | { status: "error"; reason: string };

/** An OS advisory lock (flock) held on an open file; it dies with the process that holds it. */
export class FileLock {
  private constructor(private fd: number | undefined) {}

  /** Tries once and tells busy apart from errors (unopenable file, not a regular file, flock failure). */
  static attempt(path: string, mode: LockMode = "exclusive", create = true): LockAttempt {
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDWR | (create ? constants.O_CREAT : 0) | constants.O_NOFOLLOW, 0o600);
    } catch (e) {
      return { status: "error", reason: (e as NodeJS.ErrnoException).code ?? "open failed" };
    }
    try {
      if (!fstatSync(fd).isFile()) {
        closeSync(fd);
        return { status: "error", reason: "not a regular file" };
      }
    } catch {
      closeSync(fd);
      return { status: "error", reason: "stat failed" };
    }
    if (flockFn()(fd, (mode === "shared" ? LOCK_SH : LOCK_EX) | LOCK_NB) === 0)
      return { status: "acquired", lock: new FileLock(fd) };
    const errno = sys().errno();
    closeSync(fd);
    return errno === EWOULDBLOCK ? { status: "busy" } : { status: "error", reason: `flock errno ${errno}` };
  }

  /** Tries once; returns undefined when another holder has it. */
  static tryAcquire(path: string, mode: LockMode = "exclusive"): FileLock | undefined {
    const r = FileLock.attempt(path, mode);
    if (r.status === "acquired") return r.lock;
    if (r.status === "busy") return undefined;
    throw new ToolError("lock_unavailable", "a state lock could not be opened");
  }

  /** Polls without blocking the event loop until acquired or `timeoutMs` passes. */
  static async acquire(
    path: string,
    timeoutMs = 10_000,
    mode: LockMode = "exclusive",
    signal?: AbortSignal,
  ): Promise<FileLock> {
    const deadline = Date.now() + timeoutMs;
    let wait = 2;
    for (;;) {
      if (signal?.aborted) throw new ToolError("cancelled", "the operation was cancelled");
      const lock = FileLock.tryAcquire(path, mode);
      if (lock) return lock;
      if (Date.now() >= deadline) throw new ToolError("lock_timeout", "state is busy in another operation; try again");
      await Bun.sleep(wait);
      wait = Math.min(wait * 2, 25);
    }
  }

  /** The descriptor, e.g. to hand the lock to a child process that keeps it alive. */
  get descriptor(): number | undefined {
    return this.fd;
  }

  /** Closes our descriptor without unlocking, for a lock now also held by a child's copy. */
  detach(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }

  release(): void {
    if (this.fd === undefined) return;
    flockFn()(this.fd, LOCK_UN);
    closeSync(this.fd);
    this.fd = undefined;
  }
}

/** Runs `fn` while holding the lock at `path`. */
export async function withFileLock<T>(
  path: string,
  fn: () => Promise<T> | T,
  timeoutMs?: number,
  mode: LockMode = "exclusive",
): Promise<T> {
  const lock = await FileLock.acquire(path, timeoutMs, mode);
  try {
    return await fn();
  } finally {
    lock.release();
  }
}
