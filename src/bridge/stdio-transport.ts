import { readFileSync } from "node:fs";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { JSONRPCMessageSchema, type JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { LineSplitter } from "../core/line-splitter.ts";
import { childEnv } from "../exec/env.ts";
import { TailBuffer } from "../exec/output.ts";

/** A stdout line longer than this kills the upstream: a JSON-RPC message is never that big. */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;
const OVERLONG_LINE =
  `it wrote a stdout line over ${MAX_LINE_BYTES} bytes (16 MiB), more than any JSON-RPC message needs, ` +
  "so it was stopped; it starts again on the next call";
/** Bytes of the upstream's stderr we keep (the tail), shown only after redaction. */
export const STDERR_TAIL_BYTES = 64 * 1024;
/**
 * Bytes read between hints to the garbage collector: a flooding upstream otherwise leaves many
 * megabytes of dropped chunks waiting for a collection and the server's RSS grows with them.
 */
const GC_EVERY_BYTES = 16 * 1024 * 1024;
let readSinceGc = 0;
function countRead(n: number): void {
  readSinceGc += n;
  if (readSinceGc >= GC_EVERY_BYTES) {
    readSinceGc = 0;
    // Synchronous: an asynchronous hint lagged behind a fast flood. Only floods get here often.
    Bun.gc(true);
  }
}

/** Time the runner gives the upstream's tree between SIGTERM and SIGKILL. */
const GRACE_MS = 1000;

/** A message could not be delivered because the upstream is gone: safe to retry on a new process. */
export class UpstreamGoneError extends Error {
  constructor() {
    super("the upstream process is gone");
    this.name = "UpstreamGoneError";
  }
}

export interface StdioUpstreamOptions {
  runner: string;
  command: string;
  args: string[];
  /** Variables added to the filtered server environment (secrets already resolved). */
  env: Record<string, string>;
  cwd: string;
}

/**
 * An MCP client transport over a child process started under `lsm-runner`, whose subreaper and
 * parent-death signal take the upstream's whole process tree down with it, even when we are
 * killed with SIGKILL. Reads newline-delimited JSON-RPC with a bound on the line length.
 */
export class ContainedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private proc: Bun.Subprocess<"pipe", "pipe", "pipe"> | undefined;
  private readonly stderrTail = new TailBuffer(STDERR_TAIL_BYTES);
  private closed = false;
  /** Why the transport ended, when it was not our own close(). */
  failure: string | undefined;

  constructor(private readonly options: StdioUpstreamOptions) {}

  private upstreamPid: number | undefined;

  /**
   * The upstream's own pid: the runner's first child. Read once the upstream has answered (it has
   * certainly been forked by then).
   */
  get pid(): number | undefined {
    const runner = this.proc?.pid;
    if (this.upstreamPid === undefined && runner !== undefined) {
      try {
        const first = readFileSync(`/proc/${runner}/task/${runner}/children`, "utf8").trim().split(/\s+/)[0];
        if (first) this.upstreamPid = Number(first);
      } catch {
        // The runner is gone already.
      }
    }
    return this.upstreamPid;
  }

  /**
   * Whether the upstream process still runs. Its runner keeps our pipes open while it cleans up
   * after the upstream died, so only the process itself says that a request would go nowhere.
   */
  alive(): boolean {
    if (this.closed) return false;
    const pid = this.pid;
    if (pid === undefined) return true;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
    } catch {
      return false;
    }
  }

  /** The last bytes the upstream wrote to stderr (unredacted: callers redact before showing it). */
  stderr(): string {
    return Buffer.from(this.stderrTail.tail(STDERR_TAIL_BYTES)).toString("utf8");
  }

  async start(): Promise<void> {
    const o = this.options;
    this.proc = Bun.spawn([o.runner, "--grace-ms", String(GRACE_MS), "--", o.command, ...o.args], {
      cwd: o.cwd,
      env: childEnv(o.env),
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
    });
    const proc = this.proc;
    void this.readStdout(proc.stdout);
    void (async () => {
      for await (const chunk of proc.stderr) {
        this.stderrTail.push(chunk);
        countRead(chunk.length);
      }
    })().catch(() => undefined);
    void proc.exited.then((code) => {
      if (!this.closed) this.failure ??= `the upstream process exited (status ${code})`;
      this.finish();
    });
  }

  private async readStdout(stream: ReadableStream<Uint8Array>): Promise<void> {
    const lines = new LineSplitter(
      { maxLineBytes: MAX_LINE_BYTES, onOverflow: "stop" },
      { line: (line) => this.deliver(line), oversized: () => this.fail(OVERLONG_LINE) },
    );
    try {
      for await (const chunk of stream) {
        countRead(chunk.length);
        lines.push(chunk);
        if (lines.done) return;
      }
    } catch {
      // The pipe broke because the process ended; exited() reports it.
    }
  }

  private deliver(line: Buffer): void {
    const text = line.toString("utf8").replace(/\r$/, "");
    if (text.trim() === "") return;
    let message: JSONRPCMessage;
    try {
      message = JSONRPCMessageSchema.parse(JSON.parse(text));
    } catch {
      // Stray output (a log line on stdout) is not a message; ignored like other MCP clients do.
      this.onerror?.(new Error("the upstream wrote a stdout line that is not a JSON-RPC message"));
      return;
    }
    this.onmessage?.(message);
  }

  private fail(reason: string): void {
    this.failure = reason;
    this.onerror?.(new Error(reason));
    // The calls in flight end now, with the reason: a flooding upstream can take the runner's grace
    // (and more on a busy machine) to die, and that wait must not eat the caller's timeout.
    const stopping = this.close();
    this.finish();
    void stopping;
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const proc = this.proc;
    if (!proc || this.closed) throw new UpstreamGoneError();
    try {
      proc.stdin.write(`${JSON.stringify(message)}\n`);
      await proc.stdin.flush();
    } catch {
      // The upstream died and its runner is still cleaning up: this message never arrived.
      this.failure ??= "the upstream stopped reading its stdin";
      void this.close();
      throw new UpstreamGoneError();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const proc = this.proc;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      try {
        proc.stdin.end();
      } catch {
        // Already closed.
      }
      // The runner signals the upstream's tree and reaps it; SIGKILL it only if that stalls.
      proc.kill("SIGTERM");
      const backstop = setTimeout(() => proc.kill("SIGKILL"), GRACE_MS + 4000);
      await proc.exited;
      clearTimeout(backstop);
    }
    this.finish();
  }

  private finished = false;
  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.closed = true;
    this.onclose?.();
  }
}
