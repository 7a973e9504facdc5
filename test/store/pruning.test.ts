import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SessionStore } from "../../src/sessions/store.ts";
import { LifecycleLocks } from "../../src/store/lifecycle.ts";
import { FileLock } from "../../src/store/lock.ts";
import { loadSettings } from "../../src/config/load.ts";
import { createExecServices } from "../../src/exec/services.ts";
import { containmentRunner } from "../../src/native/helpers.ts";
import { baseCapabilities } from "../../src/sessions/orientation.ts";
import { ProbeCache } from "../../src/sessions/probes.ts";
import { stopStateLeftovers, tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

function age(store: SessionStore, sid: string, seconds: number): void {
  const f = join(store.root, sid, "session.json");
  const rec = JSON.parse(readFileSync(f, "utf8"));
  writeFileSync(f, JSON.stringify({ ...rec, updated_at: rec.updated_at - seconds }));
}

describe("session pruning with live work", () => {
  test("never deletes sessions with live or uncertain work or a held lifecycle lock", async () => {
    using dir = tempDir();
    const store = new SessionStore(dir.path, { maxSessions: 100, retentionS: 60 });
    const locks = new LifecycleLocks((sid) => store.lifecyclePath(sid));
    store.pruneLock = (sid) => locks.tryExclusive(sid);
    const busy = new Set<string>();
    store.guards.push((rec) => busy.has(rec.session_id));
    store.guards.push((rec) => {
      if (rec.label === "uncertain") throw new Error("registry unreadable");
      return false;
    });
    const job = await store.create({ workdir: dir.path, label: null });
    const unsure = await store.create({ workdir: dir.path, label: "uncertain" });
    const shell = await store.create({ workdir: dir.path, label: null });
    store.update(store.require(shell.session_id), { persistent_shell_ids: ["mcp-1"] });
    const locked = await store.create({ workdir: dir.path, label: null });
    const idle = await store.create({ workdir: dir.path, label: null });
    busy.add(job.session_id);
    for (const s of [job, unsure, shell, locked, idle]) age(store, s.session_id, 3600);
    const held = FileLock.tryAcquire(store.lifecyclePath(locked.session_id), "shared")!;
    store.prune(() => false);
    expect(store.ids().sort()).toEqual([job.session_id, unsure.session_id, shell.session_id, locked.session_id].sort());
    held.release();
    busy.clear();
    store.prune(() => false);
    expect(store.ids().sort()).toEqual([unsure.session_id, shell.session_id].sort());
  });
});

// The same rules through the real wiring: createExecServices installs the job guard and the
// lifecycle prune lock on the store (nothing injected by the test).
describe("session pruning wired by createExecServices", () => {
  test("a session with a running job or a held lifecycle lock survives; once both end it is pruned", async () => {
    using dir = tempDir();
    const state = join(dir.path, "state");
    const settings = loadSettings({ flags: { state_dir: state, workspace_root: dir.path }, env: {}, cwd: dir.path });
    const store = new SessionStore(state, { maxSessions: 100, retentionS: 60 });
    const services = createExecServices({
      settings,
      sessions: store,
      runner: containmentRunner,
      teardowns: [],
      capabilities: baseCapabilities(),
      probes: new ProbeCache(),
    });
    const withJob = await store.create({ workdir: dir.path, label: null });
    const withLock = await store.create({ workdir: dir.path, label: null });
    const idle = await store.create({ workdir: dir.path, label: null });
    // The job ends when this file appears; a failing run must not leave it waiting forever, so its
    // supervisor is stopped on the way out, before the directory goes.
    const go = join(dir.path, "job-may-finish");
    using _leftovers = { [Symbol.dispose]: () => stopStateLeftovers(state) };
    await services.jobs.start({
      sessionId: withJob.session_id,
      command: `until [ -e ${go} ]; do sleep 0.05; done`,
      cwd: dir.path,
      env: {},
      name: null,
    });
    await waitFor(() => services.jobs.sessionGuard(withJob.session_id) === "live", {
      what: "the job's lease to be held",
    });
    let releaseLock!: () => void;
    const lockHeld = new Promise<void>((resolve) => {
      void services.lifecycle.hold(
        withLock.session_id,
        "shared",
        () =>
          new Promise<void>((release) => {
            releaseLock = release;
            resolve();
          }),
      );
    });
    await lockHeld;
    for (const s of [withJob, withLock, idle]) age(store, s.session_id, 3600);
    store.prune(() => false);
    expect(store.ids().sort()).toEqual([withJob.session_id, withLock.session_id].sort());
    // The work ends: the job finishes, the lock is released; now both are ordinary idle sessions.
    writeFileSync(go, "");
    releaseLock();
    await waitFor(
      async () => {
        await services.jobs.reconcile(withJob.session_id);
        return services.jobs.sessionGuard(withJob.session_id) === "none";
      },
      { what: "the job to finish" },
    );
    store.prune(() => false);
    expect(store.ids()).toEqual([]);
  }, 60_000);
});
