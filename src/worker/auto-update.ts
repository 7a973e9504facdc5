/**
 * Automatic update (spec 1.12): the controller offers its current runtime after the welcome when
 * it differs from the one this worker executes. The worker drains (calls that arrive meanwhile wait,
 * unrun), installs the runtime with `worker update`'s checks (same origin, size, SHA-256, no
 * downgrade, smoke run), switches profile.json atomically and hands over to the new runtime's
 * `worker run <profile_id>`: no credential on its command line, the profile lock passed on by
 * release-then-wait, and the same boot id, so the calls that waited are sent to the successor.
 * A successor that does not come up (exits, or no welcome within a minute) is stopped and
 * profile.json rolled back; this process takes the lock again and carries on.
 */
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { isToolError } from "../core/errors.ts";
import type { RuntimeOffer } from "../remote/protocol.ts";
import type { WorkerChannel } from "./channel.ts";
import { installRuntime } from "./fetch-runtime.ts";
import { executingRuntime, isDowngrade } from "./install.ts";
import { profilePaths, readProfile, writeProfile } from "./layout.ts";

/** Environment a predecessor hands its successor (read once, then removed from our environment). */
export const HANDOFF_BOOT_ENV = "LOCAL_SHELL_MCP_WORKER_HANDOFF_BOOT_ID";
export const HANDOFF_READY_ENV = "LOCAL_SHELL_MCP_WORKER_HANDOFF_READY";

const COME_UP_MS = 60_000;
/** How long new calls may wait for running ones before the update is put off (nothing hangs for it). */
const DRAIN_MS = 120_000;

export interface AutoUpdateOptions {
  root: string;
  profileId: string;
  server: string;
  channel: WorkerChannel;
  status: (line: string) => void;
  /** Lets go of worker.lock so the successor can take it. */
  releaseLock: () => void;
  /** Takes worker.lock again after a failed handover. */
  retakeLock: () => Promise<void>;
}

export class AutoUpdater {
  private running = false;
  /** Digests that failed here: offered again after the rollback's reconnect, they are not retried. */
  private readonly failed = new Set<string>();

  constructor(private readonly o: AutoUpdateOptions) {}

  offer(offer: RuntimeOffer): void {
    if (this.running || this.failed.has(offer.sha256)) return;
    const current = executingRuntime(this.o.root);
    // A plain binary (not run from runtimes/<sha256>/) is the operator's to replace.
    if (!current || current.sha256 === offer.sha256) return;
    if (isDowngrade(current.bundle_version, offer.version)) {
      this.failed.add(offer.sha256);
      this.o.status(
        `Status: the controller offers runtime ${offer.version}, older than ${current.bundle_version}; not ` +
          `updating (worker update --force does)`,
      );
      return;
    }
    this.running = true;
    void this.update(current.sha256, current.bundle_version, offer).finally(() => (this.running = false));
  }

  private async update(fromSha: string, fromVersion: string, offer: RuntimeOffer): Promise<void> {
    const { channel, root, profileId, status } = this.o;
    channel.hold();
    let handedOver = false;
    try {
      status(`Status: the controller offers runtime ${offer.version}; new calls wait until the running ones finish`);
      if (!(await channel.idle(DRAIN_MS))) {
        // Long calls keep running; the waiting ones go ahead, and the next welcome offers again.
        status(
          `Status: calls still run after ${DRAIN_MS / 1000} s; the update to ${offer.version} waits for the ` +
            `next connection`,
        );
        return;
      }
      status(`Status: updating the worker runtime from ${fromVersion} to ${offer.version}`);
      const installed = await installRuntime({
        root,
        server: this.o.server,
        currentVersion: fromVersion,
        expectedSha256: offer.sha256,
      });
      const before = readProfile(root, profileId);
      if (!before || before.runtime_sha256 !== fromSha)
        throw new Error("profile.json does not name the running runtime");
      writeProfile(root, { ...before, runtime_sha256: installed.sha256, runtime_version: installed.version });
      handedOver = await this.handOver(installed.binary);
      if (handedOver) {
        status(`Status: runtime ${installed.version} took over; this process exits`);
        channel.finish(0);
        return;
      }
      writeProfile(root, before);
      this.failed.add(offer.sha256);
      status(`Status: the new runtime ${installed.version} did not come up; rolled back to ${fromVersion}`);
    } catch (e) {
      this.failed.add(offer.sha256);
      const why = isToolError(e) ? e.message : e instanceof Error ? e.message : String(e);
      status(`Status: automatic update to ${offer.version} failed (${why}); staying on ${fromVersion}`);
    } finally {
      if (!handedOver) {
        channel.release();
        channel.resume();
      }
    }
  }

  /** Starts the successor and waits until it was welcomed; false when it did not come up. */
  private async handOver(binary: string): Promise<boolean> {
    const { channel, root, profileId } = this.o;
    const ready = join(profilePaths(root, profileId).dir, "handoff.ready");
    rmSync(ready, { force: true });
    channel.pause();
    const child = Bun.spawn([binary, "worker", "run", profileId], {
      env: {
        ...process.env,
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
        [HANDOFF_BOOT_ENV]: channel.bootId,
        [HANDOFF_READY_ENV]: ready,
      },
      stdin: "ignore",
      stdout: "inherit",
      stderr: "inherit",
    });
    this.o.releaseLock();
    const deadline = Date.now() + COME_UP_MS;
    for (;;) {
      if (existsSync(ready)) {
        rmSync(ready, { force: true });
        child.unref();
        return true;
      }
      if (child.exitCode !== null || child.signalCode !== null) break;
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        await child.exited;
        break;
      }
      await Bun.sleep(100);
    }
    rmSync(ready, { force: true });
    await this.o.retakeLock();
    return false;
  }
}
