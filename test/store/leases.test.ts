import { describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../../src/core/errors.ts";
import { DeferredJournal } from "../../src/store/journal.ts";
import { acquireLease, leaseState } from "../../src/store/lease.ts";
import { LifecycleLocks } from "../../src/store/lifecycle.ts";
import { FileLock } from "../../src/store/lock.ts";
import { tempDir } from "../helpers/harness.ts";

describe("liveness leases", () => {
  test("held, unlocked and uncertain", () => {
    using dir = tempDir();
    const p = join(dir.path, "lease");
    expect(leaseState(p)).toBe("uncertain");
    const lease = acquireLease(p, { job: 1 });
    expect(leaseState(p)).toBe("held");
    expect(() => acquireLease(p, {})).toThrow(ToolError);
    lease.release();
    expect(leaseState(p)).toBe("unlocked");
    writeFileSync(join(dir.path, "foreign"), "not ours\n");
    expect(leaseState(join(dir.path, "foreign"))).toBe("uncertain");
    symlinkSync(p, join(dir.path, "link"));
    expect(leaseState(join(dir.path, "link"))).toBe("uncertain");
    mkdirSync(join(dir.path, "dir"));
    expect(leaseState(join(dir.path, "dir"))).toBe("uncertain");
  });

  test("a lease handed to a child dies with it", async () => {
    using dir = tempDir();
    const p = join(dir.path, "lease");
    const lease = acquireLease(p, {});
    const child = Bun.spawn(["sleep", "30"], { stdio: ["ignore", "ignore", "ignore", lease.descriptor!] });
    lease.detach();
    expect(leaseState(p)).toBe("held");
    child.kill("SIGKILL");
    await child.exited;
    expect(leaseState(p)).toBe("unlocked");
  });
});

describe("session lifecycle locks", () => {
  test("work shares, teardown excludes, pruning never waits", async () => {
    using dir = tempDir();
    const locks = new LifecycleLocks((sid) => join(dir.path, `${sid}.lock`));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const w1 = locks.hold("s", "shared", () => gate);
    const w2 = await locks.hold("s", "shared", () => "both run");
    expect(w2).toBe("both run");
    expect(locks.tryExclusive("s")).toBeUndefined();
    let code = "";
    try {
      await locks.hold("s", "exclusive", () => "no", { timeoutMs: 100 });
    } catch (e) {
      code = (e as ToolError).code;
    }
    expect(code).toBe("session_busy");
    // Another process cannot take it exclusively either.
    expect(Bun.spawnSync(["flock", "-n", "-x", join(dir.path, "s.lock"), "true"]).exitCode).toBe(1);
    release();
    await w1;
    const ex = locks.tryExclusive("s");
    expect(ex).toBeDefined();
    ex!.release();
  });
});

describe("deferred-update journal", () => {
  test("records replay in order; malformed entries are dropped", () => {
    using dir = tempDir();
    const j = new DeferredJournal(join(dir.path, "deferred"), ["complete"]);
    const a = j.write({ session_id: "abcdEFGH", job_id: "job_0123456789ab", op: "complete", data: { n: 1 } });
    const b = j.write({ session_id: "abcdEFGH", job_id: "job_0123456789ab", op: "complete", data: { n: 2 } });
    expect(() =>
      j.write({ session_id: "abcdEFGH", job_id: "job_0123456789ab", op: "delete_everything", data: {} }),
    ).toThrow();
    const names = readdirSync(j.dir);
    expect(names.length).toBe(2);
    for (const n of names) expect(readFileSync(join(j.dir, n), "utf8")).toContain('"op":"complete"');
    writeFileSync(join(j.dir, `9999999999999999-000001-${"f".repeat(24)}.json`), "{broken");
    mkdirSync(join(j.dir, `9999999999999999-000002-${"e".repeat(24)}.json`));
    const p = j.pending();
    expect(p.updates.map((u) => u.id)).toEqual([a, b]);
    expect(readdirSync(j.dir).length).toBe(2);
    j.remove(a);
    expect(j.pending().updates.map((u) => u.id)).toEqual([b]);
  });
});

test("FileLock.attempt tells busy from errors", () => {
  using dir = tempDir();
  const p = join(dir.path, "l");
  const held = FileLock.tryAcquire(p)!;
  expect(FileLock.attempt(p).status).toBe("busy");
  expect(FileLock.attempt(join(dir.path, "missing", "x")).status).toBe("error");
  held.release();
});
