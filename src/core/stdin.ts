import { createReadStream, fstatSync } from "node:fs";
import type { Readable } from "node:stream";
import { isatty } from "node:tty";

/**
 * Bun reads a character device on stdin (`< /dev/zero`, `< /dev/urandom`) in a loop that never
 * returns to the event loop, so SIGTERM would never be handled. Such a device is read through the
 * file-stream path instead, whose reads yield between chunks. Pipes, sockets, files and terminals
 * keep `process.stdin`.
 */
export function mcpStdin(): Readable {
  try {
    if (fstatSync(0).isCharacterDevice() && !isatty(0)) return createReadStream("", { fd: 0, autoClose: false });
  } catch {
    // No stdin to inspect: process.stdin reports that itself.
  }
  return process.stdin;
}
