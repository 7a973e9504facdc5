import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../../src/core/errors.ts";
import { ensurePrivateDir, readJsonWithBackup, writeFileAtomic, writeJsonWithBackup } from "../../src/store/atomic.ts";
import { FileLock } from "../../src/store/lock.ts";
import { tempDir } from "../helpers/harness.ts";

const asObj = (v: unknown) => {
  if (typeof v !== "object" || v === null) throw new Error("not an object");
  return v as { n: number };
};

describe("atomic private store", () => {
  test("writes are private and leave no temp files", () => {
    using dir = tempDir();
    const d = join(dir.path, "state");
    ensurePrivateDir(d);
    expect(statSync(d).mode & 0o777).toBe(0o700);
    writeFileAtomic(join(d, "f"), "hello");
    expect(statSync(join(d, "f")).mode & 0o777).toBe(0o600);
    expect(readdirSync(d)).toEqual(["f"]);
  });

  test("a corrupt primary is recovered from .bak; both corrupt refuses", () => {
    using dir = tempDir();
    const f = join(dir.path, "s.json");
    writeJsonWithBackup(f, { n: 1 });
    writeJsonWithBackup(f, { n: 2 });
    expect(JSON.parse(readFileSync(`${f}.bak`, "utf8"))).toEqual({ n: 1 });
    writeFileSync(f, "{garbage");
    const r = readJsonWithBackup(f, asObj);
    expect(r).toEqual({ status: "ok", value: { n: 1 }, source: "backup" });
    writeFileSync(`${f}.bak`, "");
    let err: unknown;
    try {
      readJsonWithBackup(f, asObj);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ToolError);
    expect((err as ToolError).code).toBe("state_corrupt");
    expect(readFileSync(f, "utf8")).toBe("{garbage");
  });

  test("missing both reports missing", () => {
    using dir = tempDir();
    expect(readJsonWithBackup(join(dir.path, "none.json"), asObj)).toEqual({ status: "missing" });
  });

  test("file locks exclude a second holder, also in another process", async () => {
    using dir = tempDir();
    const p = join(dir.path, "l.lock");
    const a = FileLock.tryAcquire(p);
    expect(a).toBeDefined();
    expect(FileLock.tryAcquire(p)).toBeUndefined();
    const child = Bun.spawnSync(["flock", "-n", p, "true"]);
    expect(child.exitCode).toBe(1);
    a!.release();
    expect(Bun.spawnSync(["flock", "-n", p, "true"]).exitCode).toBe(0);
  });
});
