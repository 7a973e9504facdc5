/**
 * The worker's end of the channel: it dials out (never listens), says hello, runs calls
 * concurrently, keeps each result in an outbox until the controller acknowledges it (re-sent after
 * a reconnect), runs a call id at most once, and reconnects with jittered backoff (≤ 30 s). Only a
 * 401 (or a revocation close) ends it, with EXIT_REVOKED; a 5xx or a dropped link never touches
 * the identity.
 */
import WebSocket from "ws";
import { type Backoff, backoffMs } from "../core/backoff.ts";
import { incidentError, toToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import { BUILD_DIGEST, VERSION } from "../core/version.ts";
import {
  type Call,
  CLOSE_REVOKED,
  CLOSE_TOO_BIG,
  ControllerFrame,
  decodeFrame,
  encodeFrame,
  frameBytes,
  PROTOCOL_VERSION,
  type RuntimeOffer,
} from "../remote/protocol.ts";
import { executingRuntime } from "./install.ts";
import { EXIT_REVOKED } from "./layout.ts";
import { type WorkerRuntime, workerCapabilities, workerOperation } from "./operations.ts";

const HIGH_WATER_BYTES = 4 * 1024 * 1024;
/** Reconnect delays: 0.5 s doubling to 30 s, each drawn from its upper half. */
const RECONNECT_BACKOFF: Backoff = { firstMs: 500, maxMs: 30_000, jitter: 0.5 };
const CONNECT_TIMEOUT_MS = 15_000;
/** Results kept for an absent controller; older ones are dropped (their callers gave up). */
const MAX_OUTBOX = 1024;
/** Call ids remembered for at-most-once execution. */
const MAX_SEEN = 100_000;

export interface ChannelOptions {
  /** The worker state root (the hello names the installed runtime this process executes from). */
  root: string;
  server: string;
  token: string;
  runtime: WorkerRuntime;
  info: Record<string, string>;
  /** Status lines for the operator (never secrets). */
  status: (line: string) => void;
  /** Continues a predecessor's boot (an automatic update that drained it): its calls are ours. */
  bootId?: string;
  /** After each welcome (the first one tells an updating predecessor that we came up). */
  onWelcome?: () => void;
  /** The controller offered another runtime. */
  onRuntimeOffer?: (offer: RuntimeOffer) => void;
}

type Outcome = { kind: "revoked" } | { kind: "closed"; welcomed: boolean };

export function channelUrl(server: string): string {
  return `${server.replace(/^http/, "ws")}/remote/channel`;
}

export class WorkerChannel {
  readonly bootId: string;
  private readonly running = new Map<string, AbortController>();
  /** Calls that arrived while draining for an update: they wait (see hold()). */
  private held: Map<string, { call: Call; body?: Uint8Array }> | undefined;
  private paused: { promise: Promise<void>; resume: () => void } | undefined;
  private finished: number | undefined;
  private readonly seen = new Set<string>();
  private readonly outbox = new Map<string, string | Uint8Array>();
  private ws: WebSocket | undefined;
  private maxFrame = 0;

  constructor(private readonly options: ChannelOptions) {
    this.bootId = options.bootId ?? randomHex(16);
  }

  /** New calls wait from now on (an update drains the worker first). */
  hold(): void {
    this.held ??= new Map();
  }

  /** Runs the calls that waited, and takes new ones again. */
  release(): void {
    const held = this.held;
    this.held = undefined;
    for (const { call, body } of held?.values() ?? []) this.onCall(call, body);
  }

  /**
   * True once no call runs and every result was acknowledged (nothing would be lost by leaving);
   * false when that did not happen within `timeoutMs`.
   */
  async idle(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.running.size > 0 || this.outbox.size > 0) {
      if (Date.now() > deadline) return false;
      await Bun.sleep(100);
    }
    return true;
  }

  /** Closes the link and does not dial again until resume() or finish(). */
  pause(): void {
    if (!this.paused) {
      let resume!: () => void;
      const promise = new Promise<void>((r) => (resume = r));
      this.paused = { promise, resume };
    }
    this.ws?.close(1000, "worker runtime update");
  }

  resume(): void {
    const p = this.paused;
    this.paused = undefined;
    p?.resume();
  }

  /** Ends run() with `code` (a successor took over). */
  finish(code: number): void {
    this.finished = code;
    this.ws?.close(1000, "worker runtime update");
    this.resume();
  }

  /** Runs until revoked; resolves with the exit status. */
  async run(): Promise<number> {
    for (let attempt = 0; ; ) {
      if (this.paused) await this.paused.promise;
      if (this.finished !== undefined) return this.finished;
      const outcome = await this.connectOnce();
      if (this.finished !== undefined) return this.finished;
      if (this.paused) continue;
      if (outcome.kind === "revoked") {
        this.options.status(
          "Status: the controller revoked this worker; its identity is no longer accepted (enroll again " +
            "with a new invite)",
        );
        for (const ac of this.running.values()) ac.abort();
        return EXIT_REVOKED;
      }
      attempt = outcome.welcomed ? 0 : attempt + 1;
      await Bun.sleep(backoffMs(RECONNECT_BACKOFF, attempt));
    }
  }

  private connectOnce(): Promise<Outcome> {
    return new Promise((resolve) => {
      let settled = false;
      let welcomed = false;
      let lastHeard = Date.now();
      let watch: Timer | undefined;
      const ws = new WebSocket(channelUrl(this.options.server), {
        headers: { authorization: `Bearer ${this.options.token}` },
      });
      this.ws = ws;
      const done = (o: Outcome) => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        clearInterval(watch);
        if (this.ws === ws) this.ws = undefined;
        resolve(o);
      };
      const connectTimer = setTimeout(() => {
        ws.terminate();
        done({ kind: "closed", welcomed: false });
      }, CONNECT_TIMEOUT_MS);
      ws.on("unexpected-response", (_req, res) => {
        const status = res.statusCode ?? 0;
        if (status === 401) return done({ kind: "revoked" });
        this.options.status(`Status: the controller refused the channel (HTTP ${status}); retrying`);
        ws.terminate();
        done({ kind: "closed", welcomed: false });
      });
      ws.on("open", () => {
        clearTimeout(connectTimer);
        ws.send(
          encodeFrame({
            type: "hello",
            protocol: PROTOCOL_VERSION,
            boot_id: this.bootId,
            runtime: {
              version: VERSION,
              build_digest: BUILD_DIGEST,
              bundle_sha256: executingRuntime(this.options.root)?.sha256 ?? null,
            },
            running: [...this.running.keys()],
            unacked: [...this.outbox.keys()],
            workdir: this.options.runtime.workdir,
            capabilities: workerCapabilities(),
            info: this.options.info,
          }),
        );
      });
      ws.on("ping", () => (lastHeard = Date.now()));
      ws.on("message", (data: Buffer | string, isBinary: boolean) => {
        lastHeard = Date.now();
        const bytes = typeof data === "string" ? Buffer.byteLength(data) : data.byteLength;
        if (this.maxFrame > 0 && bytes > this.maxFrame) {
          ws.close(CLOSE_TOO_BIG, "frame too large");
          return;
        }
        let decoded;
        try {
          const raw = typeof data === "string" ? data : isBinary ? new Uint8Array(data) : data.toString("utf8");
          decoded = decodeFrame(ControllerFrame, raw);
        } catch {
          ws.close(1002, "malformed frame");
          return;
        }
        const { frame, body } = decoded;
        switch (frame.type) {
          case "welcome": {
            welcomed = true;
            this.maxFrame = frame.max_frame_bytes;
            this.options.status(`Status: connected to the controller as ${frame.name}`);
            for (const encoded of this.outbox.values()) this.send(encoded);
            this.options.onWelcome?.();
            const limit = frame.heartbeat_s * 2500;
            watch = setInterval(() => {
              if (Date.now() - lastHeard > limit) ws.terminate();
            }, frame.heartbeat_s * 1000);
            break;
          }
          case "runtime":
            this.options.onRuntimeOffer?.(frame);
            break;
          case "call":
            this.onCall(frame, body);
            break;
          case "cancel":
            this.held?.delete(frame.id);
            this.running.get(frame.id)?.abort();
            break;
          case "ack":
            this.outbox.delete(frame.id);
            break;
        }
      });
      ws.on("close", (code: number) => {
        if (code === CLOSE_REVOKED) return done({ kind: "revoked" });
        if (welcomed) this.options.status(`Status: the channel closed (${code}); reconnecting`);
        done({ kind: "closed", welcomed });
      });
      ws.on("error", () => {
        // The close event follows and decides.
        setTimeout(() => done({ kind: "closed", welcomed }), 1000);
      });
    });
  }

  private onCall(call: Call, body?: Uint8Array): void {
    if (this.held && !this.seen.has(call.id)) {
      // Not run, so not seen: a successor with our boot id gets it again from the controller.
      this.held.set(call.id, { call, ...(body ? { body } : {}) });
      return;
    }
    if (this.seen.has(call.id)) {
      // Already ran or runs: only its result may be missing on the other side.
      const out = this.outbox.get(call.id);
      if (out) this.send(out);
      return;
    }
    this.seen.add(call.id);
    if (this.seen.size > MAX_SEEN) this.seen.delete(this.seen.values().next().value!);
    const ac = new AbortController();
    this.running.set(call.id, ac);
    const deadline = setTimeout(() => ac.abort(), Math.min(call.deadline_ms, 2 ** 31 - 1));
    const op = workerOperation(call.op);
    const { runtime, token } = this.options;
    const context = { runtime, signal: ac.signal, callId: call.id, credential: token };
    const work = op
      ? op({ ...context, ...(body ? { body } : {}) }, call.args)
      : Promise.reject(Object.assign(new Error(), { code: "remote_unsupported_operation" }));
    work
      .then(
        (r) => this.complete(call.id, { ok: true, data: r.data }, r.body),
        (e) => {
          const err = op
            ? toToolError(e, `worker operation ${call.op}`)
            : {
                code: "remote_unsupported_operation",
                message: `the worker does not offer ${call.op}`,
                details: undefined,
              };
          this.complete(call.id, {
            ok: false,
            error: { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) },
          });
        },
      )
      .finally(() => {
        clearTimeout(deadline);
        this.running.delete(call.id);
      });
  }

  private complete(
    id: string,
    result: {
      ok: boolean;
      data?: unknown;
      error?: { code: string; message: string; details?: Record<string, unknown> };
    },
    body?: Uint8Array,
  ): void {
    let encoded: string | Uint8Array;
    try {
      encoded = encodeFrame({ type: "result", id, ...result }, body);
    } catch (e) {
      const { code, message } = incidentError(e, "worker result encoding", "the result could not be serialised");
      encoded = encodeFrame({ type: "result", id, ok: false, error: { code, message } });
    }
    if (this.maxFrame > 0 && frameBytes(encoded) > this.maxFrame) {
      const size = frameBytes(encoded);
      encoded = encodeFrame({
        type: "result",
        id,
        ok: false,
        error: {
          code: "remote_result_too_large",
          message: `the result is ${size} bytes, above the controller's max_http_request_bytes (${this.maxFrame})`,
        },
      });
    }
    this.outbox.set(id, encoded);
    if (this.outbox.size > MAX_OUTBOX) this.outbox.delete(this.outbox.keys().next().value!);
    this.send(encoded);
  }

  /** Sends when connected, after the socket's buffer drains below the high-water mark. */
  private send(encoded: string | Uint8Array): void {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return; // stays in the outbox
    void (async () => {
      for (let i = 0; ws.bufferedAmount > HIGH_WATER_BYTES && i < 60_000 && ws.readyState === WebSocket.OPEN; i++)
        await Bun.sleep(5);
      if (ws.readyState === WebSocket.OPEN) ws.send(encoded);
    })();
  }
}
