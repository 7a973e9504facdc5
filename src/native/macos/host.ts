/**
 * The real macOS side of the bounded runner (the `MacHost` of runner.ts): libproc through bun:ffi
 * (no SDK needed to build), launchctl for the disposable job, and a private job folder shared with
 * the launchd child:
 *   job.plist, command.json   written by the runner before bootstrap
 *   stdout.fifo, stderr.fifo  the job's StandardOutPath/StandardErrorPath (0600), read by the runner
 *   coalition.json            published by the child: {pid, coalition}
 *   release                   the gate, written by the runner once the coalition is confirmed
 *   status.json               written by the child when the command ends: {code} or {signal}
 * Built and unit-tested (through a fake host) on Linux; not exercised on a Mac by this project's CI.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ProcessEntry } from "./decisions.ts";
import type { ExitStatus, LaunchJob, MacHost } from "./runner.ts";

/** <sys/proc_info.h>: proc_listpids type "processes of one uid", proc_pidinfo flavour "coalition info". */
const PROC_UID_ONLY = 4;
const PROC_PIDCOALITIONINFO = 20;
/** struct proc_pidcoalitioninfo: uint64 coalition_id[2] (resource, jetsam) + 3 reserved uint64. */
const COALITION_INFO_SIZE = 40;
/** Each launchctl control call is bounded (spec §5.4). */
const LAUNCHCTL_TIMEOUT_MS = 1000;
const POLL_MS = 20;

interface LibProc {
  proc_listpids(type: number, typeinfo: number, buffer: Uint8Array | null, size: number): number;
  proc_pidinfo(pid: number, flavor: number, arg: bigint, buffer: Uint8Array, size: number): number;
}

let libproc: LibProc | null = null;
async function loadLibProc(): Promise<LibProc> {
  if (libproc) return libproc;
  const { dlopen, FFIType } = await import("bun:ffi");
  // libproc's functions live in libSystem (the dyld shared cache resolves the path).
  const lib = dlopen("/usr/lib/libSystem.B.dylib", {
    proc_listpids: { args: [FFIType.u32, FFIType.u32, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    proc_pidinfo: { args: [FFIType.i32, FFIType.i32, FFIType.u64, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
  });
  libproc = lib.symbols as unknown as LibProc;
  return libproc;
}

const xml = (s: string) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
/** A plist <string> holding `s`. */
export const plistString = (s: string) => `<string>${xml(s)}</string>`;

/** The launchd property list of one disposable job. */
export function jobPlist(job: LaunchJob, dir: string): string {
  const env = Object.entries(job.env).map(([k, v]) => `    <key>${xml(k)}</key>${plistString(v)}`);
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">',
    '<plist version="1.0"><dict>',
    `  <key>Label</key>${plistString(job.label)}`,
    `  <key>ProgramArguments</key><array>${job.argv.map(plistString).join("")}</array>`,
    `  <key>WorkingDirectory</key>${plistString(job.cwd)}`,
    `  <key>EnvironmentVariables</key><dict>`,
    ...env,
    "  </dict>",
    `  <key>StandardInPath</key>${plistString("/dev/null")}`,
    `  <key>StandardOutPath</key>${plistString(join(dir, "stdout.fifo"))}`,
    `  <key>StandardErrorPath</key>${plistString(join(dir, "stderr.fifo"))}`,
    "  <key>RunAtLoad</key><true/>",
    "  <key>KeepAlive</key><false/>",
    `  <key>ProcessType</key>${plistString("Interactive")}`,
    "</dict></plist>",
    "",
  ].join("\n");
}

function readJson<T>(path: string): T | null {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as T;
  } catch {
    return null; // not there yet, or half written (writers rename into place, so rarely)
  }
}

/** Writes a small file in place atomically (the other side polls for it). */
export function publish(path: string, value: unknown): void {
  writeFileSync(`${path}.tmp`, JSON.stringify(value), { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
}

async function launchctl(args: string[]): Promise<number> {
  const p = Bun.spawn(["/bin/launchctl", ...args], { stdin: "ignore", stdout: "ignore", stderr: "ignore" });
  const timer = setTimeout(() => p.kill("SIGKILL"), LAUNCHCTL_TIMEOUT_MS);
  try {
    return await p.exited;
  } finally {
    clearTimeout(timer);
  }
}

export class DarwinHost implements MacHost {
  readonly uid = process.getuid?.() ?? -1;
  readonly pid = process.pid;
  private domain: string | null = null;

  private constructor(
    private readonly dir: string,
    private readonly lib: LibProc,
  ) {}

  static async open(dir: string): Promise<DarwinHost> {
    return new DarwinHost(dir, await loadLibProc());
  }

  coalitionOf(pid: number): number | null {
    const buf = new Uint8Array(COALITION_INFO_SIZE);
    if (this.lib.proc_pidinfo(pid, PROC_PIDCOALITIONINFO, 0n, buf, buf.length) !== COALITION_INFO_SIZE) return null;
    const id = new DataView(buf.buffer).getBigUint64(0, true); // coalition_id[COALITION_TYPE_RESOURCE]
    return id > 0n && id <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(id) : null;
  }

  listProcesses(): ProcessEntry[] | null {
    const need = this.lib.proc_listpids(PROC_UID_ONLY, this.uid, null, 0);
    if (need <= 0) return null;
    // Room for processes started between the two calls; a full buffer means the list may be cut.
    const buf = new Uint8Array(need * 2 + 4096);
    const got = this.lib.proc_listpids(PROC_UID_ONLY, this.uid, buf, buf.length);
    if (got <= 0 || got >= buf.length) return null;
    const view = new DataView(buf.buffer, 0, got);
    const list: ProcessEntry[] = [];
    for (let off = 0; off + 4 <= got; off += 4) {
      const pid = view.getInt32(off, true);
      if (pid <= 0) continue;
      const coalition = this.coalitionOf(pid);
      // Gone between the list and the query: reaped, not uncertain. Alive but unreadable: uncertain.
      if (coalition === null && !alive(pid)) continue;
      list.push({ pid, uid: this.uid, coalition });
    }
    return list;
  }

  async bootstrap(job: LaunchJob): Promise<boolean> {
    const plist = join(this.dir, "job.plist");
    writeFileSync(plist, jobPlist(job, this.dir), { mode: 0o600 });
    for (const domain of [`gui/${this.uid}`, `user/${this.uid}`]) {
      if ((await launchctl(["bootstrap", domain, plist])) === 0) {
        this.domain = domain;
        return true;
      }
    }
    return false;
  }

  async bootout(label: string): Promise<boolean> {
    const domains = this.domain ? [this.domain] : [`gui/${this.uid}`, `user/${this.uid}`];
    for (const d of domains) await launchctl(["bootout", `${d}/${label}`]);
    // Gone when no domain can print it any more (launchctl print fails for an unknown service).
    for (const d of domains) if ((await launchctl(["print", `${d}/${label}`])) === 0) return false;
    return true;
  }

  async awaitPublished(deadline: number): Promise<{ pid: number; coalition: number } | null> {
    for (;;) {
      const p = readJson<{ pid: unknown; coalition: unknown }>(join(this.dir, "coalition.json"));
      if (p && Number.isSafeInteger(p.pid) && Number.isSafeInteger(p.coalition))
        return { pid: p.pid as number, coalition: p.coalition as number };
      if (Date.now() >= deadline) return null;
      await Bun.sleep(POLL_MS);
    }
  }

  releaseGate(): void {
    writeFileSync(join(this.dir, "release"), "", { mode: 0o600 });
  }

  async awaitExit(): Promise<ExitStatus | null> {
    for (;;) {
      const s = readJson<{ code?: unknown; signal?: unknown }>(join(this.dir, "status.json"));
      if (s && Number.isInteger(s.code)) return { code: s.code as number };
      if (s && Number.isInteger(s.signal)) return { signal: s.signal as number };
      if (s) return null;
      await Bun.sleep(POLL_MS * 2);
    }
  }

  kill(pid: number, signal: "SIGTERM" | "SIGKILL"): void {
    try {
      process.kill(pid, signal);
    } catch {
      // Already gone: the next scan shows it.
    }
  }

  sleep(ms: number): Promise<void> {
    return Bun.sleep(ms);
  }

  now(): number {
    return Date.now();
  }

  say(line: string): void {
    process.stderr.write(`${line}\n`);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether the gate file exists yet (the child polls it). */
export function released(dir: string): boolean {
  return existsSync(join(dir, "release"));
}
