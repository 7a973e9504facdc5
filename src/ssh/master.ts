/**
 * One OpenSSH ControlMaster per session: `ssh -G` identity preflight, the foreground master with a
 * private socket directory, liveness, and the mux-client argv that can never authenticate again.
 */
import { chmodSync, lstatSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { ToolError } from "../core/errors.ts";
import {
  capture,
  drainTail,
  type ProcessIdentity,
  runnerChild,
  runnerChildIdentity,
  shq,
  spawnGroup,
  stopGroup,
  stopOrphan,
} from "./proc.ts";
import { recoverSessionEnv, validRuntimeDir } from "./recovery.ts";

export interface Binaries {
  ssh: string;
  rsync: string;
  false: string;
  /** lsm-runner: masters and rsync run under it so they never outlive the server. */
  runner: string;
}

export type Target = { mode: "alias"; alias: string } | { mode: "direct"; host: string; user: string; port: number };

const RESOLVE_TIMEOUT_MS = 15_000;
const RESOLVE_OUTPUT_LIMIT = 1_048_576;
const CONTROL_TIMEOUT_MS = 5_000;
const STOP_GRACE_MS = 5_000;
/** TERM-to-KILL grace for a master whose runner is gone. */
const ORPHAN_GRACE_MS = 500;
const STDERR_TAIL = 16_384;
/** OpenSSH appends a 17-byte temporary suffix to the control path and sun_path holds 108 bytes. */
const MAX_CONTROL_PATH = 90;

/** Options that keep a connection to plain remote commands: no forwarding, agent, X11 or local/remote commands. */
function isolation(connectTimeoutS: number): string[] {
  return [
    "-o",
    "ClearAllForwardings=yes",
    "-o",
    "Tunnel=no",
    "-o",
    "ForwardAgent=no",
    "-o",
    "ForwardX11=no",
    "-o",
    "ForwardX11Trusted=no",
    "-o",
    "PermitLocalCommand=no",
    "-o",
    "RemoteCommand=none",
    "-o",
    "ForkAfterAuthentication=no",
    "-o",
    `ConnectTimeout=${Math.max(1, Math.floor(connectTimeoutS))}`,
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=3",
  ];
}

export function destination(target: Target): { args: string[]; dest: string } {
  if (target.mode === "alias") return { args: [], dest: target.alias };
  return { args: ["-l", target.user, "-p", String(target.port)], dest: target.host };
}

/** The display name of a target: the alias, or user@host:port with IPv6 bracketed. */
export function targetLabel(target: Target): string {
  if (target.mode === "alias") return target.alias;
  const host = target.host.includes(":") ? `[${target.host}]` : target.host;
  return `${target.user}@${host}:${target.port}`;
}

/** The host part of an rsync remote operand. */
export function rsyncHost(target: Target): string {
  if (target.mode === "alias") return target.alias;
  return target.host.includes(":") ? `[${target.host}]` : target.host;
}

const RESOLVE_FAILED = "SSH configuration for the target could not be resolved";

/**
 * Learns the effective HostName and Port with `ssh -G` (no connection is made, but the user's
 * configuration, including Match exec, is evaluated). The identity is (lowercase hostname, port).
 */
export async function resolveIdentity(bin: Binaries, target: Target): Promise<{ host: string; port: number }> {
  const { args, dest } = destination(target);
  let proc: Subprocess;
  try {
    proc = spawnGroup([bin.ssh, "-G", ...args, "--", dest], { stdout: "pipe" });
  } catch {
    throw new ToolError("connection_start_failed", RESOLVE_FAILED);
  }
  const timer = setTimeout(() => void stopGroup(proc, 500), RESOLVE_TIMEOUT_MS);
  const out = await capture(proc.stdout as ReadableStream<Uint8Array>, RESOLVE_OUTPUT_LIMIT);
  const code = await proc.exited;
  clearTimeout(timer);
  if (code !== 0 || out.truncated) throw new ToolError("connection_start_failed", RESOLVE_FAILED);
  const text = Buffer.from(out.bytes).toString("utf8");
  const host = /^hostname (.*)$/m.exec(text)?.[1];
  const portText = /^port (.*)$/m.exec(text)?.[1];
  const port = portText && /^\d{1,5}$/.test(portText) ? Number(portText) : NaN;
  if (!host || /\s/.test(host) || !(port >= 1 && port <= 65535))
    throw new ToolError("connection_start_failed", RESOLVE_FAILED);
  return { host: host.toLowerCase(), port };
}

/** Creates the private (0700) directory holding the control socket, keeping the path short enough. */
function controlDir(uid: number): { dir: string; socket: string } {
  const runtime = process.env.XDG_RUNTIME_DIR;
  const base = runtime && validRuntimeDir(runtime, uid) ? runtime : tmpdir();
  const first = mkdtempSync(join(base, `lsm-ssh-${uid}-`));
  chmodSync(first, 0o700);
  const socket = join(first, "mux.sock");
  if (Buffer.byteLength(socket) <= MAX_CONTROL_PATH && !socket.includes("${")) return { dir: first, socket };
  rmSync(first, { recursive: true, force: true });
  const short = mkdtempSync(join("/tmp", `ls${uid}-`));
  chmodSync(short, 0o700);
  const shortSocket = join(short, "m");
  if (Buffer.byteLength(shortSocket) <= MAX_CONTROL_PATH) return { dir: short, socket: shortSocket };
  rmSync(short, { recursive: true, force: true });
  throw new ToolError("connection_start_failed", "cannot create a short enough SSH control path");
}

/** A control directory without a socket younger than this may belong to a master still starting. */
const STALE_CONTROL_DIR_MS = 10 * 60 * 1000;

/** True when something accepts connections on the unix socket `path`. */
async function socketAnswers(path: string): Promise<boolean> {
  try {
    const sock = await Bun.connect({ unix: path, socket: { data() {} } });
    sock.end();
    return true;
  } catch {
    return false;
  }
}

/**
 * Removes control directories a killed server left: ours by name and owner, whose socket no longer
 * answers (or, with no socket at all, that are older than any master could take to start). A live
 * master of another server always answers on its socket, so it is never touched. Returns the count.
 */
export async function sweepControlDirs(uid = process.getuid!(), now = Date.now()): Promise<number> {
  const runtime = process.env.XDG_RUNTIME_DIR;
  const bases = new Set([tmpdir(), "/tmp", ...(runtime && validRuntimeDir(runtime, uid) ? [runtime] : [])]);
  let removed = 0;
  for (const base of bases) {
    let names: string[];
    try {
      names = readdirSync(base);
    } catch {
      continue;
    }
    for (const name of names) {
      if (!name.startsWith(`lsm-ssh-${uid}-`) && !name.startsWith(`ls${uid}-`)) continue;
      const dir = join(base, name);
      try {
        const st = lstatSync(dir);
        if (!st.isDirectory() || st.uid !== uid) continue;
        const socketName = name.startsWith("lsm-ssh-") ? "mux.sock" : "m";
        // ours hold nothing but the socket: anything else in it is not ours to remove
        if (readdirSync(dir).some((e) => e !== socketName)) continue;
        const socket = join(dir, socketName);
        const present = (() => {
          try {
            return lstatSync(socket).isSocket();
          } catch {
            return false;
          }
        })();
        if (present ? await socketAnswers(socket) : now - st.mtimeMs < STALE_CONTROL_DIR_MS) continue;
        rmSync(dir, { recursive: true, force: true });
        removed++;
      } catch {
        // gone meanwhile
      }
    }
  }
  return removed;
}

/** Patterns that mean OpenSSH needed a prompt or agent that no session environment could provide. */
const SINGLE_MARKERS = [
  "can't open /dev/tty",
  "cannot open /dev/tty",
  "display not set",
  "no askpass program specified",
  "ssh_askpass not set",
  "ssh_askpass:",
  "cannot notify: no askpass",
  "requested to askpass",
];
const PAIRED_MARKERS: [string, string][] = [
  ["sign_and_send_pubkey: signing failed", "agent refused operation"],
  ["sign_and_send_pubkey: signing failed", "incorrect passphrase supplied"],
  ["load key", "incorrect passphrase supplied"],
];

/** Maps the master's private stderr tail to a public error; the text itself never leaves. */
export function masterStartError(tail: string, status: number): ToolError {
  const t = tail.toLowerCase();
  if (SINGLE_MARKERS.some((m) => t.includes(m)) || PAIRED_MARKERS.some(([a, b]) => t.includes(a) && t.includes(b))) {
    return new ToolError(
      "connection_start_failed",
      "SSH authentication requires an interactive system prompt, but no usable user session environment was available",
    );
  }
  return new ToolError("connection_start_failed", `SSH master exited with status ${status}`);
}

export type MasterState = "starting" | "ready" | "lost" | "closing" | "closed";

export interface MasterOptions {
  bin: Binaries;
  target: Target;
  connectTimeoutS: number;
}

export class Master {
  state: MasterState = "starting";
  private proc: Subprocess | undefined;
  private sshPid: number | undefined;
  /** The master under the runner, recorded once it is ready (see stopOrphan). */
  private sshIdentity: ProcessIdentity | undefined;
  private dir: string | undefined;
  private socket: string | undefined;
  private stderrDone: Promise<Uint8Array> | undefined;
  private closing: Promise<void> | undefined;
  private readonly startAbort = new AbortController();
  /** Called once when an established master disappears. */
  onLost: (() => void) | undefined;

  constructor(private readonly opts: MasterOptions) {}

  /** The ssh master's own pid (it runs under lsm-runner, whose pid is not the master's). */
  get pid(): number | null {
    if (!this.proc || this.state === "closed") return null;
    this.sshPid ??= runnerChild(this.proc.pid);
    return this.sshPid ?? this.proc.pid;
  }

  /** `-S` argument: OpenSSH expands `%` tokens in control paths, so they are doubled. */
  private ctlArg(): string {
    return this.socket!.replaceAll("%", "%%");
  }

  /** The mux-client argv (without destination): reuses the socket and can never authenticate or proxy. */
  transport(): string[] {
    const { bin, connectTimeoutS } = this.opts;
    const proxy = shq(bin.false).replaceAll("%", "%%");
    return [
      bin.ssh,
      "-T",
      "-E",
      "/dev/null",
      "-o",
      "LogLevel=QUIET",
      "-S",
      this.ctlArg(),
      "-o",
      "ControlMaster=no",
      "-o",
      "ControlPersist=no",
      "-o",
      "BatchMode=yes",
      "-o",
      "NumberOfPasswordPrompts=0",
      ...isolation(connectTimeoutS),
      "-o",
      `ProxyCommand=${proxy}`,
      "-o",
      "StdinNull=no",
      "-o",
      "PubkeyAuthentication=no",
      "-o",
      "PasswordAuthentication=no",
      "-o",
      "KbdInteractiveAuthentication=no",
      "-o",
      "GSSAPIAuthentication=no",
      "-o",
      "HostbasedAuthentication=no",
    ];
  }

  /** argv for one command channel running `remoteProgram` on the target. */
  channelArgv(remoteProgram: string): string[] {
    const [ssh, ...rest] = this.transport();
    const { args, dest } = destination(this.opts.target);
    return [ssh!, "-o", "SessionType=default", ...rest, ...args, "--", dest, remoteProgram];
  }

  /** Starts the master and waits until its socket answers `-O check`. */
  async start(): Promise<void> {
    const { bin, target, connectTimeoutS } = this.opts;
    const { dir, socket } = controlDir(process.getuid!());
    this.dir = dir;
    this.socket = socket;
    const env = await recoverSessionEnv(process.env, process.getuid!());
    if (this.startAbort.signal.aborted)
      throw new ToolError("session_closed", "the session was closed while connecting");
    const { args, dest } = destination(target);
    const argv = [
      bin.ssh,
      "-M",
      "-N",
      "-S",
      this.ctlArg(),
      "-o",
      "ControlMaster=yes",
      "-o",
      "ControlPersist=no",
      ...isolation(connectTimeoutS),
      ...args,
      "--",
      dest,
    ];
    try {
      this.proc = spawnGroup(argv, { env, stderr: "pipe", runner: bin.runner });
    } catch {
      throw new ToolError("connection_start_failed", "cannot start the SSH master");
    }
    const proc = this.proc;
    this.stderrDone = drainTail(proc.stderr as ReadableStream<Uint8Array>, STDERR_TAIL);
    void proc.exited.then(() => {
      if (this.state === "ready") {
        this.state = "lost";
        this.onLost?.();
      }
      // a runner that died first (SIGKILL) can no longer stop the master; we still can
      if (this.sshIdentity) void stopOrphan(this.sshIdentity, ORPHAN_GRACE_MS);
    });
    const deadline = Date.now() + connectTimeoutS * 1000;
    for (;;) {
      if (this.startAbort.signal.aborted)
        throw new ToolError("session_closed", "the session was closed while connecting");
      if (proc.exitCode !== null || proc.signalCode !== null) {
        const tail = await Promise.race([this.stderrDone, Bun.sleep(1000).then(() => new Uint8Array())]);
        throw masterStartError(Buffer.from(tail).toString("utf8"), proc.exitCode ?? 255);
      }
      if (this.socketPresent() && (await this.control("check")) === 0) {
        if (proc.exitCode === null) {
          this.sshIdentity = runnerChildIdentity(proc.pid);
          this.state = "ready";
          return;
        }
      }
      if (Date.now() > deadline)
        throw new ToolError("connection_start_failed", "SSH master did not become ready before the startup deadline");
      await Bun.sleep(50);
    }
  }

  private socketPresent(): boolean {
    try {
      return lstatSync(this.socket!).isSocket();
    } catch {
      return false;
    }
  }

  /** `-O check|exit` through the socket; a timeout counts as 255. Output is drained and dropped. */
  async control(op: "check" | "exit"): Promise<number> {
    const [ssh, ...rest] = this.transport();
    const { args, dest } = destination(this.opts.target);
    let proc: Subprocess;
    try {
      proc = spawnGroup([ssh!, ...rest, ...args, "-O", op, "--", dest], { stdout: "pipe", stderr: "pipe" });
    } catch {
      return 255;
    }
    const drained = Promise.all([
      drainTail(proc.stdout as ReadableStream<Uint8Array>, STDERR_TAIL),
      drainTail(proc.stderr as ReadableStream<Uint8Array>, STDERR_TAIL),
    ]);
    const code = await Promise.race([proc.exited, Bun.sleep(CONTROL_TIMEOUT_MS).then(() => -1)]);
    if (code === -1) {
      await stopGroup(proc, 500);
      return 255;
    }
    await drained;
    return code;
  }

  /** Cheap liveness: the master process still runs and its socket exists. */
  quickAlive(): boolean {
    if (this.state !== "ready") return false;
    const p = this.proc!;
    if (p.exitCode !== null || p.signalCode !== null || !this.socketPresent()) {
      this.markLost();
      return false;
    }
    return true;
  }

  private markLost(): void {
    if (this.state === "ready") {
      this.state = "lost";
      this.onLost?.();
    }
  }

  /** Throws connection_lost unless the master is ready; `thorough` also asks the master itself. */
  async ensureReady(thorough = false): Promise<void> {
    if (this.state !== "ready")
      throw new ToolError("connection_lost", `SSH master is not ready (state: ${this.state})`);
    if (!this.quickAlive()) throw new ToolError("connection_lost", "SSH master connection was lost");
    if (thorough && (await this.control("check")) !== 0) {
      this.markLost();
      throw new ToolError("connection_lost", "SSH master connection was lost");
    }
  }

  /** Stops the master (`-O exit`, then the group) and removes the private directory. Idempotent. */
  close(): Promise<void> {
    if (!this.closing) this.closing = this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.startAbort.abort();
    const wasReady = this.state === "ready";
    this.state = "closing";
    const proc = this.proc;
    if (proc) {
      if (wasReady && proc.exitCode === null && this.socketPresent()) {
        await this.control("exit");
        await Promise.race([proc.exited, Bun.sleep(STOP_GRACE_MS)]);
      }
      await stopGroup(proc, STOP_GRACE_MS);
      await Promise.race([this.stderrDone, Bun.sleep(1000)]);
    }
    if (this.dir) {
      try {
        if (statSync(this.dir).uid === process.getuid!()) rmSync(this.dir, { recursive: true, force: true });
      } catch {
        // already removed
      }
    }
    this.state = "closed";
  }
}
