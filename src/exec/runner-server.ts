import { log } from "../core/log.ts";

/**
 * The long-lived containment runner (`lsm-runner --serve`): one per server, which hands each
 * bounded command to a supervisor it forked ahead of the request instead of us spawning a fresh
 * runner for each, so a command costs one fork+exec of the shell. Each supervisor keeps every guarantee of a per-call
 * runner (own subreaper context, parent-death signal, cgroup, deadline, cleanup, confirmation); this
 * side only frames requests and relays output. Fail closed: when the server dies or misbehaves,
 * every call in flight ends as killed (containment unconfirmed), the supervisors stop their trees
 * on the parent-death signal, and later calls start a new server or fall back to per-call runners.
 */

/** One contained command as the bounded runner sees it, whichever way it was started. */
export interface ContainedProcess {
  /** The per-call runner's or the supervisor's pid (0 until the server reports it). */
  readonly pid: number;
  /** The runner's exit status; with `signalCode` set, how it died is all we know. */
  readonly exited: Promise<number>;
  /** Non-null when the runner was killed (or the runner server died): nothing proves the tree gone. */
  readonly signalCode: string | number | null;
  /** Asks the runner to stop the tree (as SIGTERM to a per-call runner). */
  kill(): void;
  /** Resolves when both output streams have ended. */
  readonly outputDone: Promise<void>;
  /** Stops reading the output (what is left belongs to processes we no longer wait for). */
  stopOutput(): void;
}

/** Receives output chunks: stream 0 is stdout, 1 stderr. */
export type OutputSink = (stream: 0 | 1, chunk: Uint8Array) => void;

const FRAME_HEAD = 9;
/** A server that has not said hello by then is given up (killed; calls use per-call runners). */
const HELLO_TIMEOUT_MS = 10_000;
/** Servers that died before we stop starting new ones and spawn one runner per call instead. */
const MAX_SERVER_DEATHS = 3;

interface Call {
  pid: number;
  signalCode: string | null;
  sink: OutputSink;
  open: number;
  reaped: boolean;
  resolveExit: (code: number) => void;
  resolveOutput: () => void;
}

function frame(type: string, id: number, data?: Uint8Array): Uint8Array {
  const out = new Uint8Array(FRAME_HEAD + (data?.length ?? 0));
  const view = new DataView(out.buffer);
  view.setUint32(0, 5 + (data?.length ?? 0), true);
  out[4] = type.charCodeAt(0);
  view.setUint32(5, id, true);
  if (data) out.set(data, FRAME_HEAD);
  return out;
}

const encoder = new TextEncoder();

/**
 * The environment part of a request ("ENVC\0" and the "NAME=value\0" entries), encoded once per
 * environment object: calls without overrides pass the same frozen object every time.
 */
const envBlocks = new WeakMap<Record<string, string>, Uint8Array>();

function envBlock(env: Record<string, string>): Uint8Array {
  let block = envBlocks.get(env);
  if (!block) {
    const parts = [String(Object.keys(env).length)];
    for (const [k, v] of Object.entries(env)) parts.push(`${k}=${v}`);
    block = encoder.encode(`${parts.join("\0")}\0`);
    if (Object.isFrozen(env)) envBlocks.set(env, block);
  }
  return block;
}

/** The data of an 'R' frame: "CWD\0", the environment block, then the runner's arguments. */
function requestData(cwd: string, env: Record<string, string>, args: string[]): Uint8Array {
  const head = encoder.encode(`${cwd}\0`);
  const block = envBlock(env);
  const tail = encoder.encode(`${args.join("\0")}\0`);
  const out = new Uint8Array(head.length + block.length + tail.length);
  out.set(head);
  out.set(block, head.length);
  out.set(tail, head.length + block.length);
  return out;
}

export class RunnerServer {
  private readonly proc: Bun.Subprocess<"pipe", "pipe", "inherit">;
  private readonly calls = new Map<number, Call>();
  private nextId = 1;
  private dead = false;
  /** The server said it stops by itself: no new calls; those in flight still get their ends. */
  private stopping = false;
  /** True once the server said hello, false if it died first. */
  readonly ready: Promise<boolean>;
  private hello!: (ok: boolean) => void;

  constructor(runner: string) {
    this.ready = new Promise((resolve) => {
      this.hello = resolve;
    });
    this.proc = Bun.spawn([runner, "--serve"], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    const helloTimer = setTimeout(() => this.fail("did not start in time"), HELLO_TIMEOUT_MS);
    void this.ready.then(() => clearTimeout(helloTimer));
    void this.read();
    void this.proc.exited.then(() => this.fail(`exited with ${this.proc.exitCode ?? this.proc.signalCode}`));
  }

  get pid(): number {
    return this.proc.pid;
  }

  get alive(): boolean {
    return !this.dead && !this.stopping;
  }

  /**
   * Starts one command: `args` are a per-call runner's arguments (options, `--`, program).
   * Undefined when the server is already gone (nothing was sent, so the caller may start the
   * command another way).
   */
  run(args: string[], cwd: string, env: Record<string, string>, sink: OutputSink): ContainedProcess | undefined {
    if (this.dead || this.stopping) return undefined;
    const id = this.nextId++;
    let resolveExit!: (code: number) => void;
    let resolveOutput!: () => void;
    const exited = new Promise<number>((r) => (resolveExit = r));
    const outputDone = new Promise<void>((r) => (resolveOutput = r));
    const call: Call = { pid: 0, signalCode: null, sink, open: 2, reaped: false, resolveExit, resolveOutput };
    this.calls.set(id, call);
    if (!this.send(frame("R", id, requestData(cwd, env, args)))) {
      // The request may have gone out in part: the call fails closed like every call in flight.
      this.fail("cannot take a request");
      abandon(call);
      this.calls.delete(id);
    }
    return {
      get pid() {
        return call.pid;
      },
      exited,
      get signalCode() {
        return call.signalCode;
      },
      kill: () => {
        if (!call.reaped) this.send(frame("K", id));
      },
      outputDone,
      stopOutput: () => {
        if (call.open === 0) return;
        call.open = 0;
        call.resolveOutput();
        this.send(frame("F", id));
        if (call.reaped) this.calls.delete(id);
      },
    };
  }

  /** Asks the server to stop every tree and exit. */
  stop(): void {
    this.proc.kill("SIGTERM");
  }

  private send(bytes: Uint8Array): boolean {
    if (this.dead) return false;
    try {
      this.proc.stdin.write(bytes);
      void this.proc.stdin.flush();
      return true;
    } catch {
      return false;
    }
  }

  private async read(): Promise<void> {
    const reader = this.proc.stdout.getReader();
    let buf: Uint8Array = new Uint8Array(0);
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buf = buf.length ? concat(buf, value) : value;
        let at = 0;
        while (buf.length - at >= FRAME_HEAD) {
          const view = new DataView(buf.buffer, buf.byteOffset + at);
          const len = view.getUint32(0, true);
          if (len < 5) throw new Error(`bad frame length ${len}`);
          if (buf.length - at < 4 + len) break;
          this.dispatch(
            String.fromCharCode(buf[at + 4]!),
            view.getUint32(5, true),
            buf.subarray(at + FRAME_HEAD, at + 4 + len),
          );
          at += 4 + len;
        }
        buf = at === buf.length ? new Uint8Array(0) : buf.slice(at);
      }
      this.fail("closed its output");
    } catch (e) {
      this.fail(`misbehaved: ${(e as Error).message}`);
    }
  }

  private dispatch(type: string, id: number, data: Uint8Array): void {
    if (type === "H") {
      this.hello(true);
      return;
    }
    if (type === "Q") {
      // The server stops by itself (garbage on its request pipe, say) and is about to stop every
      // command in flight: their exit statuses that follow are the server's doing, not theirs.
      const why = new TextDecoder()
        .decode(data)
        .replace(/[^\x20-\x7e]/g, "?")
        .slice(0, 64);
      log.warn(
        `containment runner server ${this.proc.pid} stops: ${why}; ${this.calls.size} command(s) in flight ` +
          `end unconfirmed`,
      );
      for (const call of this.calls.values()) if (!call.reaped) call.signalCode = `runner server stopped (${why})`;
      this.stopping = true;
      return;
    }
    const call = this.calls.get(id);
    if (!call) return; // output of a call whose reader already stopped
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    switch (type) {
      case "S":
        call.pid = view.getUint32(0, true);
        return;
      case "O":
      case "E":
        if (call.open > 0) call.sink(type === "O" ? 0 : 1, data);
        return;
      case "C":
        if (call.open > 0 && --call.open === 0) call.resolveOutput();
        if (call.open === 0 && call.reaped) this.calls.delete(id);
        return;
      case "X": {
        const status = view.getUint32(0, true);
        const sig = status & 0x7f;
        call.reaped = true;
        if (sig !== 0) call.signalCode = `signal ${sig}`;
        call.resolveExit(sig !== 0 ? 128 + sig : (status >> 8) & 0xff);
        if (call.open === 0) this.calls.delete(id);
        return;
      }
      case "N":
        // Never started: reported like a per-call runner that could not set up containment.
        call.sink(1, encoder.encode(`lsm-runner: containment unavailable: ${new TextDecoder().decode(data)}\n`));
        call.reaped = true;
        call.open = 0;
        call.resolveOutput();
        call.resolveExit(125);
        this.calls.delete(id);
        return;
      default:
        throw new Error(`unknown frame type ${JSON.stringify(type)}`);
    }
  }

  /** The server is gone or cannot be trusted: every call in flight fails closed. */
  private fail(why: string): void {
    if (this.dead) return;
    this.dead = true;
    this.hello(false);
    // Its supervisors get SIGTERM from the parent-death signal and stop their trees.
    this.proc.kill("SIGKILL");
    if (this.calls.size > 0)
      log.warn(
        `containment runner server ${this.proc.pid} ${why}; ${this.calls.size} command(s) in flight end unconfirmed`,
      );
    for (const call of this.calls.values()) abandon(call);
    this.calls.clear();
  }
}

/** Ends a call whose server is gone: killed as far as we can tell, nothing proves its tree gone. */
function abandon(call: Call): void {
  if (!call.reaped) {
    call.signalCode = "runner server died";
    call.reaped = true;
    call.resolveExit(-1);
  }
  call.open = 0;
  call.resolveOutput();
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

let current: RunnerServer | undefined;
let deaths = 0;

/**
 * The runner server for this runner binary, started on first use; undefined once servers keep
 * dying (or cannot start), so callers fall back to one runner per call.
 */
export async function runnerServer(runner: string): Promise<RunnerServer | undefined> {
  if (current?.alive) return (await current.ready) ? current : runnerServer(runner);
  if (current) {
    current = undefined;
    deaths += 1;
  }
  if (deaths >= MAX_SERVER_DEATHS) return undefined;
  try {
    current = new RunnerServer(runner);
  } catch (e) {
    log.warn(`cannot start the containment runner server: ${(e as Error).message}; using one runner per command`);
    deaths = MAX_SERVER_DEATHS;
    return undefined;
  }
  return (await current.ready) ? current : runnerServer(runner);
}

/** The running server, if any (shutdown and tests). */
export function currentRunnerServer(): RunnerServer | undefined {
  return current?.alive ? current : undefined;
}
