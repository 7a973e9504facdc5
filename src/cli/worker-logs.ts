/**
 * `worker logs`: systemd services log to the user journal (journalctl runs with our terminal);
 * launchd services to a private file, of which we print a bounded tail and, with --follow, what is
 * appended, starting over when the file is rotated or truncated.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { launchdLogPath } from "../worker/service-defs.ts";
import type { WorkerService } from "../worker/service.ts";

/** Never read more than this from the end of the log file. */
const MAX_TAIL_BYTES = 4 * 1024 * 1024;
const FOLLOW_INTERVAL_MS = 500;

function readRange(path: string, start: number, end: number): Buffer {
  const fd = openSync(path, "r");
  try {
    const buf = Buffer.alloc(end - start);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(fd, buf, off, buf.length - off, start + off);
      if (n === 0) break;
      off += n;
    }
    return buf.subarray(0, off);
  } finally {
    closeSync(fd);
  }
}

function identity(path: string): { ino: number; size: number } | undefined {
  try {
    const st = statSync(path);
    return { ino: st.ino, size: st.size };
  } catch {
    return undefined;
  }
}

export async function showLogs(svc: WorkerService, root: string, lines: number, follow: boolean): Promise<number> {
  if (svc.manager === "systemd") {
    const proc = Bun.spawn(svc.journalArgv(lines, follow), { stdin: "inherit", stdout: "inherit", stderr: "inherit" });
    return await proc.exited;
  }
  const path = launchdLogPath(root);
  let seen = identity(path);
  if (!seen) {
    process.stderr.write(`no worker log yet at ${path}\n`);
    return follow ? 1 : 0;
  }
  const start = Math.max(0, seen.size - MAX_TAIL_BYTES);
  const tail = readRange(path, start, seen.size).toString("utf8").split("\n");
  if (tail.at(-1) === "") tail.pop();
  if (start > 0) tail.shift();
  if (tail.length) process.stdout.write(`${tail.slice(-lines).join("\n")}\n`);
  if (!follow) return 0;
  let offset = seen.size;
  for (;;) {
    await Bun.sleep(FOLLOW_INTERVAL_MS);
    const now = identity(path);
    if (!now) continue;
    if (now.ino !== seen.ino || now.size < offset) offset = 0;
    seen = now;
    if (now.size > offset) {
      const end = Math.min(now.size, offset + MAX_TAIL_BYTES);
      process.stdout.write(readRange(path, offset, end));
      offset = end;
    }
  }
}
