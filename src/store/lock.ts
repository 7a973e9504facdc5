import { dlopen, FFIType } from "bun:ffi";
import { closeSync, constants, openSync } from "node:fs";
import { ToolError } from "../core/errors.ts";

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

let libc: { symbols: { flock: (fd: number, op: number) => number } } | undefined;
function flockFn(): (fd: number, op: number) => number {
  libc ??= dlopen("libc.so.6", { flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
  return libc.symbols.flock;
}

/** An OS advisory lock (flock) held on an open file; it dies with the process that holds it. */
export class FileLock {
  private constructor(private fd: number | undefined) {}

  /** Tries once; returns undefined when another holder has it. */
  static tryAcquire(path: string): FileLock | undefined {
    const fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
    if (flockFn()(fd, LOCK_EX | LOCK_NB) === 0) return new FileLock(fd);
    closeSync(fd);
    return undefined;
  }

  /** Polls without blocking the event loop until acquired or `timeoutMs` passes. */
  static async acquire(path: string, timeoutMs = 10_000): Promise<FileLock> {
    const deadline = Date.now() + timeoutMs;
    let wait = 2;
    for (;;) {
      const lock = FileLock.tryAcquire(path);
      if (lock) return lock;
      if (Date.now() >= deadline) throw new ToolError("lock_timeout", "state is busy in another operation; try again");
      await Bun.sleep(wait);
      wait = Math.min(wait * 2, 25);
    }
  }

  release(): void {
    if (this.fd === undefined) return;
    flockFn()(this.fd, LOCK_UN);
    closeSync(this.fd);
    this.fd = undefined;
  }
}

/** Runs `fn` while holding the lock at `path`. */
export async function withFileLock<T>(path: string, fn: () => Promise<T> | T, timeoutMs?: number): Promise<T> {
  const lock = await FileLock.acquire(path, timeoutMs);
  try {
    return await fn();
  } finally {
    lock.release();
  }
}
