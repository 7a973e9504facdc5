import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SessionStore } from "../../src/sessions/store.ts";
import { LifecycleLocks } from "../../src/store/lifecycle.ts";
import { FileLock } from "../../src/store/lock.ts";
import { tempDir } from "../helpers/harness.ts";

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
