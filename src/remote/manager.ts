/**
 * The controller's side of the worker channels: one WorkerChannel per enrolled worker, keyed by
 * its current name (worker-channel.ts holds a worker's link and calls), the checks a call passes
 * before it is queued, and the origin workers reach the controller at.
 */
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import type { LinkHandle, LinkSocket } from "./link.ts";
import { type Hello, heartbeatSeconds } from "./protocol.ts";
import type { RemoteStore } from "./store.ts";
import { type CallOptions, type CallResult, WorkerChannel } from "./worker-channel.ts";

export class RemoteManager {
  private readonly workers = new Map<string, WorkerChannel>();
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

  private state(name: string): WorkerChannel {
    let s = this.workers.get(name);
    if (!s) {
      s = new WorkerChannel(name, this.startedAt, this.settings, this.heartbeatS);
      this.workers.set(name, s);
    }
    return s;
  }

  /** Connected, or re-making its link after a rename (see WorkerChannel.online). */
  online(name: string): boolean {
    return this.workers.get(name)?.online() ?? false;
  }

  queueDepth(name: string): number {
    return this.workers.get(name)?.depth() ?? 0;
  }

  runtimeOf(name: string): Hello["runtime"] | undefined {
    return this.workers.get(name)?.runtime;
  }

  /**
   * Runs `run` when `machine` is next attached: a cleanup call that failed because the worker was
   * away or stalled is made again then. Bounded; the oldest is dropped first.
   */
  whenBack(machine: string, run: () => void): void {
    this.state(machine).runWhenBack(run);
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
    return this.state(machine).call(op, args, options);
  }

  /**
   * A worker completed its hello on a freshly upgraded socket: its channel takes the new link and
   * returns the handle the socket reports through.
   */
  attach(machine: string, socket: LinkSocket, hello: Hello): LinkHandle {
    return this.state(machine).attach(socket, hello);
  }

  /** Revocation: close the channel now and fail everything it carried. */
  revoke(machine: string): void {
    const s = this.workers.get(machine);
    if (!s) return;
    this.workers.delete(machine);
    s.revoke();
  }

  /**
   * A rename re-keys the worker's channel (its calls keep pointing at it) and closes the link: the
   * worker reconnects at once, is known by its token under the new name, and its calls carry on
   * through the usual hello.
   */
  rename(oldName: string, newName: string): void {
    const s = this.workers.get(oldName);
    if (!s) return;
    this.workers.delete(oldName);
    this.workers.set(newName, s);
    s.renamed(newName);
  }

  close(): void {
    for (const s of this.workers.values()) s.shutDown();
    this.workers.clear();
  }
}
