/**
 * One enrolled worker as the controller sees it: its current link, the calls queued and in flight
 * on it, heartbeats, cancellation, and what happens to its calls when the link drops.
 *
 * Call life: queued (at most remote_max_pending_jobs wait) → sent (at most remote_max_concurrent_jobs
 * per worker) → result (acknowledged, always). A link that drops keeps sent calls for a grace period:
 * the worker's next `hello` lists what it still runs and which results wait in its outbox; a call
 * it never saw is sent again (the worker runs a call id at most once), and a worker that came back
 * with a new boot id lost its calls (`remote_worker_restarted`). A call the worker may have run is
 * never failed as "offline, try again": it waits for the worker's return (its result comes from the
 * outbox) for ten heartbeats or until its deadline, and then its outcome is reported unknown
 * (`remote_outcome_unknown`).
 */
import { join } from "node:path";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { randomHex } from "../core/random.ts";
import { BUILD_DIGEST } from "../core/version.ts";
import { outcomeUnknown, workerError, workerOffline } from "./call-errors.ts";
import { drained, type Link, type LinkHandle, type LinkSocket, sendNow } from "./link.ts";
import {
  CLOSE_REPLACED,
  CLOSE_REVOKED,
  type Call,
  encodeFrame,
  frameBytes,
  type Hello,
  type Result,
} from "./protocol.ts";

/** How long a worker may be away before calls for it fail `remote_worker_offline`. */
export const OFFLINE_GRACE_MS = 10_000;
/** How long past its deadline the controller waits for a call's own answer. */
const DEADLINE_SLACK_MS = 15_000;
/** setTimeout's largest delay. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** Call ids recently sent to one worker, remembered to tell a late answer from an unsolicited one. */
const SENT_MEMORY = 4096;
/** Deferred cleanups kept per worker at most; the worker's own start-up sweep is the backstop. */
const MAX_WHEN_BACK = 256;

export interface CallOptions {
  signal?: AbortSignal;
  /** How long the call may take, in ms (default remote_job_timeout_s). */
  deadlineMs?: number;
  /** Raw bytes sent beside the arguments in one binary frame (transfer chunks). */
  body?: Uint8Array;
}

export interface CallResult {
  data: unknown;
  body?: Uint8Array;
}

interface PendingCall {
  /** The worker's channel (not its name: a rename re-keys the manager's table, the calls stay). */
  worker: WorkerChannel;
  id: string;
  op: string;
  args: unknown;
  body?: Uint8Array;
  deadlineAt: number;
  sent: boolean;
  resolve(r: CallResult): void;
  reject(e: ToolError): void;
  cleanup(): void;
  offlineTimer?: Timer;
  deadlineTimer?: Timer;
}

export class WorkerChannel {
  private link?: Link;
  private bootId?: string;
  /** Last runtime the worker reported (for orientation). */
  runtime?: Hello["runtime"];
  private readonly queue: PendingCall[] = [];
  private readonly inflight = new Map<string, PendingCall>();
  /** The last SENT_MEMORY call ids sent (insertion-ordered; oldest evicted first). */
  private readonly sent = new Set<string>();
  /** When a rename closed the link, until the worker is back (see online()). */
  private renamedAt?: number;
  /** Cleanup that could not reach the worker (a cut copy's partial file), run when it is back. */
  private readonly whenBack: Array<() => void> = [];

  constructor(
    public name: string,
    /** When the link went away (or the controller started, for a worker not seen since). */
    private offlineSince: number,
    private readonly settings: Settings,
    private readonly heartbeatS: number,
  ) {}

  /**
   * Connected, or re-making its link after a rename (the controller closed it; the worker dials
   * again at once and calls made meanwhile wait for it): a just-renamed worker is not "offline".
   */
  online(): boolean {
    return this.link !== undefined || (this.renamedAt !== undefined && Date.now() - this.renamedAt < OFFLINE_GRACE_MS);
  }

  /** Calls queued or running. */
  depth(): number {
    return this.queue.length + this.inflight.size;
  }

  /** Runs `run` when the worker is next attached. Bounded; the oldest is dropped first. */
  runWhenBack(run: () => void): void {
    this.whenBack.push(run);
    if (this.whenBack.length > MAX_WHEN_BACK) this.whenBack.shift();
  }

  /** Queues operation `op` (the manager checked the worker is enrolled and remote is enabled). */
  call(op: string, args: unknown, options: CallOptions): Promise<CallResult> {
    const machine = this.name;
    const limit = this.settings.remote_max_concurrent_jobs + this.settings.remote_max_pending_jobs;
    if (this.queue.length + this.inflight.size >= limit) {
      return Promise.reject(
        new ToolError("remote_queue_full", `worker ${machine} has ${limit} calls queued or running; try again later`),
      );
    }
    if (options.signal?.aborted) return Promise.reject(new ToolError("cancelled", "the operation was cancelled"));
    // Away longer than the grace already: say so now rather than make every call wait.
    if (!this.link && Date.now() - this.offlineSince > OFFLINE_GRACE_MS) return Promise.reject(workerOffline(machine));
    const deadlineMs = options.deadlineMs ?? this.settings.remote_job_timeout_s * 1000;
    return new Promise<CallResult>((resolve, reject) => {
      const id = `c_${randomHex(12)}`;
      const onAbort = () => this.abandon(call, new ToolError("cancelled", "the operation was cancelled"));
      const call: PendingCall = {
        worker: this,
        id,
        op,
        args,
        body: options.body,
        deadlineAt: Date.now() + deadlineMs,
        sent: false,
        resolve,
        reject,
        cleanup: () => {
          options.signal?.removeEventListener("abort", onAbort);
          clearTimeout(call.offlineTimer);
          clearTimeout(call.deadlineTimer);
        },
      };
      options.signal?.addEventListener("abort", onAbort, { once: true });
      // The worker stops the call at its deadline and answers; this only guards against a worker
      // that stays connected but never answers.
      call.deadlineTimer = setTimeout(
        () =>
          this.abandon(
            call,
            call.sent && !this.link
              ? outcomeUnknown(this.name, op)
              : new ToolError(
                  "remote_timeout",
                  `worker ${machine} did not answer ${op} within ${Math.round(deadlineMs / 1000)} s`,
                ),
          ),
        Math.min(MAX_TIMER_MS, deadlineMs + DEADLINE_SLACK_MS),
      );
      this.queue.push(call);
      if (!this.link) this.armOffline(call);
      this.pump();
    });
  }

  /**
   * Fails a call unless its worker is back in time. A call never sent fails `remote_worker_offline`
   * after the grace. One that was sent may have run, so it waits longer for the worker (its result
   * then comes from the outbox): ten heartbeats (2 min by default, past a 60 s outage and the
   * worker's ≤ 30 s reconnect backoff), then its outcome is unknown; never "offline, try again".
   */
  private armOffline(call: PendingCall): void {
    clearTimeout(call.offlineTimer);
    call.offlineTimer = setTimeout(
      () => {
        if (call.worker.link) return;
        this.finish(call, call.sent ? outcomeUnknown(call.worker.name, call.op) : workerOffline(call.worker.name));
      },
      call.sent ? Math.max(OFFLINE_GRACE_MS, 10 * this.heartbeatS * 1000) : OFFLINE_GRACE_MS,
    );
  }

  /** Removes a call from every table and settles it. */
  private finish(call: PendingCall, outcome: CallResult | ToolError): void {
    this.inflight.delete(call.id);
    const i = this.queue.indexOf(call);
    if (i >= 0) this.queue.splice(i, 1);
    call.cleanup();
    if (outcome instanceof ToolError) call.reject(outcome);
    else call.resolve(outcome);
    this.pump();
  }

  /** The caller gave up: tell the worker to stop it if it already runs there. */
  private abandon(call: PendingCall, error: ToolError): void {
    const link = this.link;
    if (call.sent && link) sendNow(link, encodeFrame({ type: "cancel", id: call.id }));
    this.finish(call, error);
  }

  private pump(): void {
    const link = this.link;
    if (!link) return;
    while (this.queue.length > 0 && this.inflight.size < this.settings.remote_max_concurrent_jobs) {
      const call = this.queue.shift()!;
      this.inflight.set(call.id, call);
      call.sent = true;
      void this.transmit(link, call);
    }
  }

  frameLimit(): number {
    return this.settings.max_http_request_bytes;
  }

  private async transmit(link: Link, call: PendingCall): Promise<void> {
    const remaining = Math.max(1, call.deadlineAt - Date.now());
    const frame: Call = { type: "call", id: call.id, op: call.op, args: call.args, deadline_ms: remaining };
    const encoded = encodeFrame(frame, call.body);
    const limit = this.frameLimit();
    if (limit > 0 && frameBytes(encoded) > limit) {
      this.finish(
        call,
        new ToolError(
          "remote_call_too_large",
          `the call is ${frameBytes(encoded)} bytes, above max_http_request_bytes (${limit})`,
        ),
      );
      return;
    }
    await drained(link);
    if (this.link !== link) return; // the hello of the next link resends it
    const sent = this.sent;
    sent.delete(call.id);
    sent.add(call.id);
    if (sent.size > SENT_MEMORY) sent.delete(sent.values().next().value!);
    sendNow(link, encoded);
  }

  /**
   * The worker completed its hello on a freshly upgraded socket: welcome it, settle or resend the
   * calls the previous link carried, and return the handle its socket reports through.
   */
  attach(socket: LinkSocket, hello: Hello): LinkHandle {
    const previous = this.link;
    if (previous) {
      clearInterval(previous.heartbeat);
      previous.socket.close(CLOSE_REPLACED, "replaced by a newer connection");
    }
    const restarted = this.bootId !== undefined && this.bootId !== hello.boot_id;
    this.renamedAt = undefined;
    this.bootId = hello.boot_id;
    this.runtime = hello.runtime;
    const link: Link = {
      socket,
      bootId: hello.boot_id,
      missedPongs: 0,
      runtime: hello.runtime,
      heartbeat: setInterval(() => this.beat(link), this.heartbeatS * 1000),
      dropped: { unsent: 0, stale: 0 },
    };
    this.link = link;
    socket.send(
      encodeFrame({
        type: "welcome",
        name: this.name,
        heartbeat_s: this.heartbeatS,
        runtime_matches: hello.runtime.build_digest === BUILD_DIGEST,
        max_frame_bytes: this.frameLimit(),
      }),
    );
    const known = new Set([...hello.running, ...hello.unacked]);
    for (const call of [...this.inflight.values()]) {
      clearTimeout(call.offlineTimer);
      if (restarted) {
        this.finish(
          call,
          new ToolError(
            "remote_worker_restarted",
            `worker ${this.name} restarted while the call ran; its outcome is unknown`,
          ),
        );
      } else if (!known.has(call.id)) {
        void this.transmit(link, call);
      }
    }
    for (const call of this.queue) clearTimeout(call.offlineTimer);
    this.pump();
    for (const run of this.whenBack.splice(0)) run();
    if (hello.runtime.bundle_sha256) this.offerRuntime(link, hello.runtime.bundle_sha256);
    return {
      result: (frame, body) => this.onResult(link, frame, body),
      pong: () => {
        if (this.link === link) link.missedPongs = 0;
      },
      closed: () => this.detach(link),
    };
  }

  /**
   * A worker running an installed runtime learns the controller's current one when it differs
   * (spec 1.12's automatic update; the worker decides when and whether to install it). A plain
   * binary reports no runtime digest and is never offered one; nor is anything packed for it.
   */
  private offerRuntime(link: Link, running: string): void {
    void import("./bundle.ts")
      .then(({ bundleCache }) => bundleCache(join(this.settings.state_dir, "remote-bundle")).current())
      .then((bundle) => {
        if (this.link !== link || bundle.manifest.sha256 === running) return;
        link.socket.send(
          encodeFrame({ type: "runtime", sha256: bundle.manifest.sha256, version: bundle.manifest.bundle_version }),
        );
      })
      .catch((e) => log.debug(`no worker runtime to offer ${this.name}: ${(e as Error).message}`));
  }

  private beat(link: Link): void {
    if (link.missedPongs >= 2) {
      log.warn(`worker ${this.name} missed two heartbeats; dropping its link`);
      link.socket.close(1001, "heartbeat timeout");
      this.detach(link);
      return;
    }
    link.missedPongs++;
    try {
      link.socket.ping();
    } catch {
      // closing
    }
  }

  /**
   * A result arrived: settle its call (if anyone still waits) and always acknowledge it, so the
   * worker's outbox empties. Only a call in flight on this worker is settled: a result for a call
   * another worker carries, one never sent, or one already settled (a duplicate, or an answer
   * after the caller gave up) is dropped, counted, and logged once per link.
   */
  private onResult(link: Link, frame: Result, body?: Uint8Array): void {
    try {
      link.socket.send(encodeFrame({ type: "ack", id: frame.id }));
    } catch {
      // The worker re-sends after reconnecting; the call is settled below either way.
    }
    const call = this.inflight.get(frame.id);
    if (!call?.sent) {
      const kind = this.sent.has(frame.id) ? "stale" : "unsent";
      if (link.dropped[kind]++ === 0) {
        const what =
          kind === "stale" ? "a call already settled (a duplicate or a late answer)" : "a call it was never sent";
        // A late answer is ordinary (a lost ack, a caller that gave up); one never asked for is not.
        const line =
          `worker ${this.name} sent a result for ${what}; dropped (further ones on this link are counted, not ` +
          `logged)`;
        if (kind === "stale") log.info(line);
        else log.warn(line);
      }
      return;
    }
    if (frame.ok) this.finish(call, { data: frame.data, ...(body ? { body } : {}) });
    else this.finish(call, workerError(this.name, frame.error));
  }

  /** The link closed (or was dropped): queued calls wait for the worker's return up to the grace. */
  private detach(link: Link): void {
    clearInterval(link.heartbeat);
    if (this.link !== link) return;
    const { unsent, stale } = link.dropped;
    if (unsent + stale > 0) {
      log.warn(
        `worker ${this.name}'s link dropped ${unsent} result(s) for calls never sent, ${stale} for settled ones`,
      );
    }
    this.link = undefined;
    this.offlineSince = Date.now();
    for (const call of [...this.inflight.values(), ...this.queue]) this.armOffline(call);
  }

  /** Revocation: close the link now and fail everything it carried. */
  revoke(): void {
    if (this.link) {
      clearInterval(this.link.heartbeat);
      this.link.socket.close(CLOSE_REVOKED, "worker revoked");
      this.link = undefined;
    }
    const err = new ToolError("remote_worker_revoked", `worker ${this.name} was revoked`);
    for (const call of [...this.inflight.values(), ...this.queue]) {
      call.cleanup();
      call.reject(err);
    }
    this.inflight.clear();
    this.queue.length = 0;
  }

  /**
   * The worker now goes by `newName`: its calls carry on, and the link is closed so the worker
   * reconnects at once under the new name.
   */
  renamed(newName: string): void {
    this.name = newName;
    if (this.link) {
      const link = this.link;
      this.renamedAt = Date.now();
      link.socket.close(CLOSE_REPLACED, "renamed");
      this.detach(link);
    }
  }

  /** Controller shutdown: close the link and fail every call. */
  shutDown(): void {
    if (this.link) {
      clearInterval(this.link.heartbeat);
      this.link.socket.close(1001, "controller shutting down");
    }
    const err = new ToolError(
      "remote_worker_offline",
      `the controller is shutting down; worker ${this.name} is unavailable`,
    );
    for (const call of [...this.inflight.values(), ...this.queue]) {
      call.cleanup();
      call.reject(err);
    }
  }
}
