/**
 * The controller's side of the worker channels: one live link per enrolled worker, the calls
 * queued and in flight on it, heartbeats, cancellation, and what happens when a link drops.
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
import {
  CLOSE_REPLACED,
  CLOSE_REVOKED,
  type Call,
  encodeFrame,
  frameBytes,
  type Hello,
  heartbeatSeconds,
  type Result,
} from "./protocol.ts";
import type { RemoteStore } from "./store.ts";

/** How long a worker may be away before calls for it fail `remote_worker_offline`. */
export const OFFLINE_GRACE_MS = 10_000;
/** How long past its deadline the controller waits for a call's own answer. */
const DEADLINE_SLACK_MS = 15_000;
/** setTimeout's largest delay. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** Outgoing bytes buffered on one link before senders wait. */
const HIGH_WATER_BYTES = 4 * 1024 * 1024;

/** The part of a Bun ServerWebSocket a link needs (kept narrow so tests of the logic stay simple). */
export interface LinkSocket {
  send(data: string | Uint8Array): number;
  close(code?: number, reason?: string): void;
  ping(): void;
  getBufferedAmount(): number;
}

/** What an attached socket reports through (bound to its worker, whatever its name becomes). */
export interface LinkHandle {
  result(frame: Result, body?: Uint8Array): void;
  pong(): void;
  closed(): void;
}

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
  /** The worker's state (not its name: a rename re-keys the table, the calls stay). */
  worker: WorkerState;
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

interface Link {
  socket: LinkSocket;
  bootId: string;
  missedPongs: number;
  heartbeat: Timer;
  runtime: Hello["runtime"];
  /** Results that settled nothing: for calls never sent to this worker, or settled already. */
  dropped: { unsent: number; stale: number };
}

/** Call ids recently sent to one worker, remembered to tell a late answer from an unsolicited one. */
const SENT_MEMORY = 4096;

interface WorkerState {
  name: string;
  link?: Link;
  bootId?: string;
  /** Last runtime the worker reported (for orientation). */
  runtime?: Hello["runtime"];
  queue: PendingCall[];
  inflight: Map<string, PendingCall>;
  /** The last SENT_MEMORY call ids sent (insertion-ordered; oldest evicted first). */
  sent: Set<string>;
  /** When the link went away (or the controller started, for a worker not seen since). */
  offlineSince: number;
  /** When a rename closed the link, until the worker is back (see online()). */
  renamedAt?: number;
  /** Cleanup that could not reach the worker (a cut copy's partial file), run when it is back. */
  whenBack: Array<() => void>;
}

/** Deferred cleanups kept per worker at most; the worker's own start-up sweep is the backstop. */
const MAX_WHEN_BACK = 256;

/** A worker's failure as the controller's caller sees it: a full disk is named as the worker's. */
function workerError(
  machine: string,
  error: { code: string; message: string; details?: Record<string, unknown> } | undefined,
): ToolError {
  if (!error) return new ToolError("remote_call_failed", "the worker reported a failure");
  if (error.code === "local_disk_full")
    return new ToolError("remote_disk_full", `worker ${machine}: ${error.message}`, error.details);
  return new ToolError(error.code, error.message, error.details);
}

/** A sent call whose worker stayed away past its deadline: it may or may not have run. */
function outcomeUnknown(machine: string, op: string): ToolError {
  return new ToolError(
    "remote_outcome_unknown",
    `worker ${machine} lost its link while running ${op} and did not come back in time; it may have ` +
      `completed: check its effects before running it again`,
  );
}

function offline(machine: string): ToolError {
  return new ToolError(
    "remote_worker_offline",
    `worker ${machine} is not connected; start it on its host (remote_admin reconnect_command) and try again`,
  );
}

export class RemoteManager {
  private readonly workers = new Map<string, WorkerState>();
  private readonly startedAt = Date.now();
  readonly heartbeatS: number;

  constructor(
    readonly settings: Settings,
    readonly store: RemoteStore,
  ) {
    this.heartbeatS = heartbeatSeconds(settings.remote_poll_timeout_s);
  }

  private origin: string | undefined;

  /** The listener's own origin, used for join URLs when base_url is not configured. */
  useListenerOrigin(origin: string): void {
    this.origin ??= origin;
  }

  /** The origin workers reach us at: base_url, else the listener's. */
  publicOrigin(): string {
    const o = this.settings.base_url?.replace(/\/+$/, "") ?? this.origin;
    if (!o) throw new ToolError("remote_unavailable", "remote workers need the HTTP listener");
    return o;
  }

  private state(name: string): WorkerState {
    let s = this.workers.get(name);
    if (!s) {
      s = { name, queue: [], inflight: new Map(), sent: new Set(), offlineSince: this.startedAt, whenBack: [] };
      this.workers.set(name, s);
    }
    return s;
  }

  /**
   * Connected, or re-making its link after a rename (the controller closed it; the worker dials
   * again at once and calls made meanwhile wait for it): a just-renamed worker is not "offline".
   */
  online(name: string): boolean {
    const s = this.workers.get(name);
    if (!s) return false;
    return s.link !== undefined || (s.renamedAt !== undefined && Date.now() - s.renamedAt < OFFLINE_GRACE_MS);
  }

  queueDepth(name: string): number {
    const s = this.workers.get(name);
    return s ? s.queue.length + s.inflight.size : 0;
  }

  runtimeOf(name: string): Hello["runtime"] | undefined {
    return this.workers.get(name)?.runtime;
  }

  /**
   * Runs `run` when `machine` is next attached: a cleanup call that failed because the worker was
   * away or stalled is made again then. Bounded; the oldest is dropped first.
   */
  whenBack(machine: string, run: () => void): void {
    const s = this.state(machine);
    s.whenBack.push(run);
    if (s.whenBack.length > MAX_WHEN_BACK) s.whenBack.shift();
  }

  /** Runs operation `op` on the worker `machine` and resolves with its result (or a typed error). */
  call(machine: string, op: string, args: unknown, options: CallOptions = {}): Promise<CallResult> {
    if (!this.settings.remote_enabled)
      return Promise.reject(new ToolError("remote_disabled", "remote workers are disabled on this server"));
    if (!this.store.byName(machine))
      return Promise.reject(
        new ToolError(
          "remote_machine_not_found",
          `no enrolled worker is named ${JSON.stringify(machine)}; see remote_admin list`,
        ),
      );
    const s = this.state(machine);
    const limit = this.settings.remote_max_concurrent_jobs + this.settings.remote_max_pending_jobs;
    if (s.queue.length + s.inflight.size >= limit) {
      return Promise.reject(
        new ToolError("remote_queue_full", `worker ${machine} has ${limit} calls queued or running; try again later`),
      );
    }
    if (options.signal?.aborted) return Promise.reject(new ToolError("cancelled", "the operation was cancelled"));
    // Away longer than the grace already: say so now rather than make every call wait.
    if (!s.link && Date.now() - s.offlineSince > OFFLINE_GRACE_MS) return Promise.reject(offline(machine));
    const deadlineMs = options.deadlineMs ?? this.settings.remote_job_timeout_s * 1000;
    return new Promise<CallResult>((resolve, reject) => {
      const id = `c_${randomHex(12)}`;
      const onAbort = () => this.abandon(call, new ToolError("cancelled", "the operation was cancelled"));
      const call: PendingCall = {
        worker: s,
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
            call.sent && !s.link
              ? outcomeUnknown(s.name, op)
              : new ToolError(
                  "remote_timeout",
                  `worker ${machine} did not answer ${op} within ${Math.round(deadlineMs / 1000)} s`,
                ),
          ),
        Math.min(MAX_TIMER_MS, deadlineMs + DEADLINE_SLACK_MS),
      );
      s.queue.push(call);
      if (!s.link) this.armOffline(call);
      this.pump(s);
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
        this.finish(call, call.sent ? outcomeUnknown(call.worker.name, call.op) : offline(call.worker.name));
      },
      call.sent ? Math.max(OFFLINE_GRACE_MS, 10 * this.heartbeatS * 1000) : OFFLINE_GRACE_MS,
    );
  }

  /** Removes a call from every table and settles it. */
  private finish(call: PendingCall, outcome: CallResult | ToolError): void {
    const s = call.worker;
    s.inflight.delete(call.id);
    const i = s.queue.indexOf(call);
    if (i >= 0) s.queue.splice(i, 1);
    call.cleanup();
    if (outcome instanceof ToolError) call.reject(outcome);
    else call.resolve(outcome);
    this.pump(s);
  }

  /** The caller gave up: tell the worker to stop it if it already runs there. */
  private abandon(call: PendingCall, error: ToolError): void {
    const link = call.worker.link;
    if (call.sent && link) this.sendNow(link, encodeFrame({ type: "cancel", id: call.id }));
    this.finish(call, error);
  }

  private pump(s: WorkerState): void {
    const link = s.link;
    if (!link) return;
    while (s.queue.length > 0 && s.inflight.size < this.settings.remote_max_concurrent_jobs) {
      const call = s.queue.shift()!;
      s.inflight.set(call.id, call);
      call.sent = true;
      void this.transmit(link, call);
    }
  }

  private frameLimit(): number {
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
    await this.drained(link);
    if (call.worker.link !== link) return; // the hello of the next link resends it
    const sent = call.worker.sent;
    sent.delete(call.id);
    sent.add(call.id);
    if (sent.size > SENT_MEMORY) sent.delete(sent.values().next().value!);
    this.sendNow(link, encoded);
  }

  /** Waits while the socket has more than the high-water mark buffered. */
  private async drained(link: Link): Promise<void> {
    for (let i = 0; link.socket.getBufferedAmount() > HIGH_WATER_BYTES && i < 60_000; i++) await Bun.sleep(5);
  }

  private sendNow(link: Link, data: string | Uint8Array): void {
    try {
      link.socket.send(data);
    } catch {
      // A closing socket: its close handler decides what happens to the calls.
    }
  }

  /**
   * A worker completed its hello on a freshly upgraded socket: welcome it, settle or resend the
   * calls the previous link carried, and return the handle its socket reports through.
   */
  attach(machine: string, socket: LinkSocket, hello: Hello): LinkHandle {
    const s = this.state(machine);
    const previous = s.link;
    if (previous) {
      clearInterval(previous.heartbeat);
      previous.socket.close(CLOSE_REPLACED, "replaced by a newer connection");
    }
    const restarted = s.bootId !== undefined && s.bootId !== hello.boot_id;
    s.renamedAt = undefined;
    s.bootId = hello.boot_id;
    s.runtime = hello.runtime;
    const link: Link = {
      socket,
      bootId: hello.boot_id,
      missedPongs: 0,
      runtime: hello.runtime,
      heartbeat: setInterval(() => this.beat(s, link), this.heartbeatS * 1000),
      dropped: { unsent: 0, stale: 0 },
    };
    s.link = link;
    socket.send(
      encodeFrame({
        type: "welcome",
        name: machine,
        heartbeat_s: this.heartbeatS,
        runtime_matches: hello.runtime.build_digest === BUILD_DIGEST,
        max_frame_bytes: this.frameLimit(),
      }),
    );
    const known = new Set([...hello.running, ...hello.unacked]);
    for (const call of [...s.inflight.values()]) {
      clearTimeout(call.offlineTimer);
      if (restarted) {
        this.finish(
          call,
          new ToolError(
            "remote_worker_restarted",
            `worker ${s.name} restarted while the call ran; its outcome is unknown`,
          ),
        );
      } else if (!known.has(call.id)) {
        void this.transmit(link, call);
      }
    }
    for (const call of s.queue) clearTimeout(call.offlineTimer);
    this.pump(s);
    for (const run of s.whenBack.splice(0)) run();
    if (hello.runtime.bundle_sha256) this.offerRuntime(s, link, hello.runtime.bundle_sha256);
    return {
      result: (frame, body) => this.onResult(s, link, frame, body),
      pong: () => {
        if (s.link === link) link.missedPongs = 0;
      },
      closed: () => this.detach(s, link),
    };
  }

  /**
   * A worker running an installed runtime learns the controller's current one when it differs
   * (spec 1.12's automatic update; the worker decides when and whether to install it). A plain
   * binary reports no runtime digest and is never offered one; nor is anything packed for it.
   */
  private offerRuntime(s: WorkerState, link: Link, running: string): void {
    void import("./bundle.ts")
      .then(({ bundleCache }) => bundleCache(join(this.settings.state_dir, "remote-bundle")).current())
      .then((bundle) => {
        if (s.link !== link || bundle.manifest.sha256 === running) return;
        link.socket.send(
          encodeFrame({ type: "runtime", sha256: bundle.manifest.sha256, version: bundle.manifest.bundle_version }),
        );
      })
      .catch((e) => log.debug(`no worker runtime to offer ${s.name}: ${(e as Error).message}`));
  }

  private beat(s: WorkerState, link: Link): void {
    if (link.missedPongs >= 2) {
      log.warn(`worker ${s.name} missed two heartbeats; dropping its link`);
      link.socket.close(1001, "heartbeat timeout");
      this.detach(s, link);
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
  private onResult(s: WorkerState, link: Link, frame: Result, body?: Uint8Array): void {
    try {
      link.socket.send(encodeFrame({ type: "ack", id: frame.id }));
    } catch {
      // The worker re-sends after reconnecting; the call is settled below either way.
    }
    const call = s.inflight.get(frame.id);
    if (!call?.sent) {
      const kind = s.sent.has(frame.id) ? "stale" : "unsent";
      if (link.dropped[kind]++ === 0) {
        const what =
          kind === "stale" ? "a call already settled (a duplicate or a late answer)" : "a call it was never sent";
        // A late answer is ordinary (a lost ack, a caller that gave up); one never asked for is not.
        const line =
          `worker ${s.name} sent a result for ${what}; dropped (further ones on this link are counted, not ` +
          `logged)`;
        if (kind === "stale") log.info(line);
        else log.warn(line);
      }
      return;
    }
    if (frame.ok) this.finish(call, { data: frame.data, ...(body ? { body } : {}) });
    else this.finish(call, workerError(s.name, frame.error));
  }

  /** The link closed (or was dropped): queued calls wait for the worker's return up to the grace. */
  private detach(s: WorkerState, link: Link): void {
    clearInterval(link.heartbeat);
    if (s.link !== link) return;
    const { unsent, stale } = link.dropped;
    if (unsent + stale > 0) {
      log.warn(`worker ${s.name}'s link dropped ${unsent} result(s) for calls never sent, ${stale} for settled ones`);
    }
    s.link = undefined;
    s.offlineSince = Date.now();
    for (const call of [...s.inflight.values(), ...s.queue]) this.armOffline(call);
  }

  /** Revocation: close the channel now and fail everything it carried. */
  revoke(machine: string): void {
    const s = this.workers.get(machine);
    if (!s) return;
    this.workers.delete(machine);
    if (s.link) {
      clearInterval(s.link.heartbeat);
      s.link.socket.close(CLOSE_REVOKED, "worker revoked");
      s.link = undefined;
    }
    const err = new ToolError("remote_worker_revoked", `worker ${machine} was revoked`);
    for (const call of [...s.inflight.values(), ...s.queue]) {
      call.cleanup();
      call.reject(err);
    }
    s.inflight.clear();
    s.queue.length = 0;
  }

  /**
   * A rename re-keys the worker's state (its calls keep pointing at it) and closes the link: the
   * worker reconnects at once, is known by its token under the new name, and its calls carry on
   * through the usual hello.
   */
  rename(oldName: string, newName: string): void {
    const s = this.workers.get(oldName);
    if (!s) return;
    this.workers.delete(oldName);
    this.workers.set(newName, s);
    s.name = newName;
    if (s.link) {
      const link = s.link;
      s.renamedAt = Date.now();
      link.socket.close(CLOSE_REPLACED, "renamed");
      this.detach(s, link);
    }
  }

  close(): void {
    for (const [name, s] of this.workers) {
      if (s.link) {
        clearInterval(s.link.heartbeat);
        s.link.socket.close(1001, "controller shutting down");
      }
      const err = new ToolError(
        "remote_worker_offline",
        `the controller is shutting down; worker ${name} is unavailable`,
      );
      for (const call of [...s.inflight.values(), ...s.queue]) {
        call.cleanup();
        call.reject(err);
      }
    }
    this.workers.clear();
  }
}
