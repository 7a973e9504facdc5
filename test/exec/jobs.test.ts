import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../../src/core/errors.ts";
import { JobManager } from "../../src/exec/jobs/manager.ts";
import { containmentRunner } from "../../src/native/helpers.ts";
import { jobsLockPath } from "../../src/store/lifecycle.ts";
import { FileLock } from "../../src/store/lock.ts";
import { tempDir } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const SID = "abcdEFGH";

/** The status saved in jobs.json, without the journal's pending records. */
const savedStatus = (state: string) =>
  (JSON.parse(readFileSync(join(state, "jobs.json"), "utf8")) as { jobs: Array<{ status: string }> }).jobs[0]!.status;

function manager(state: string): JobManager {
  return new JobManager({
    stateDir: state,
    shell: "/bin/bash",
    maxJobs: 100,
    maxLogBytes: 1024,
    runner: containmentRunner,
  });
}

describe("job registry", () => {
  test("a finished job's log is bounded and its terminal state is durable", async () => {
    using dir = tempDir();
    const jobs = manager(dir.path);
    const j = await jobs.start({
      sessionId: SID,
      command: "head -c 5000 /dev/zero | tr '\\0' x; echo; echo tail-line",
      cwd: dir.path,
      env: {},
      name: "big",
    });
    const [done] = await jobs.poll(SID, [j.job_id], 15_000);
    expect(done).toMatchObject({ status: "succeeded", exit_code: 0, log_truncated: true, output_bytes: 5011 });
    const out = jobs.output(done!, 1, 10_000);
    expect(out.text).toBe("tail-line");
    expect(jobs.readRows()[0]!.status).toBe("succeeded");
  }, 20_000);

  test("corrupt primary is recovered from .bak; both corrupt is refused and nothing is reset", async () => {
    using dir = tempDir();
    const jobs = manager(dir.path);
    const j = await jobs.start({ sessionId: SID, command: "true", cwd: dir.path, env: {}, name: null });
    await jobs.poll(SID, [j.job_id], 10_000);
    // The supervisor records the end and then exits; until it has, its lease still guards the
    // session (the .bak may hold the row as running), which is not what this test is about.
    const pid = jobs.readRows()[0]!.supervisor_pid!;
    await waitFor(() => !pidAlive(pid), { what: "the supervisor to exit" });
    const file = join(dir.path, "jobs.json");
    writeFileSync(file, "{not json");
    expect(jobs.readRows().map((r) => r.job_id)).toEqual([j.job_id]);
    expect(jobs.sessionGuard(SID)).toBe("none");
    writeFileSync(`${file}.bak`, "[]");
    let code = "";
    try {
      await jobs.reconcile(SID);
    } catch (e) {
      code = (e as ToolError).code;
    }
    expect(code).toBe("state_corrupt");
    expect(jobs.sessionGuard(SID)).toBe("uncertain");
    await expect(jobs.start({ sessionId: SID, command: "true", cwd: dir.path, env: {}, name: null })).rejects.toThrow(
      ToolError,
    );
    expect(readFileSync(file, "utf8")).toBe("{not json");
  }, 20_000);

  test("the supervisor records its job's end: readers see it at once, the next writer saves it once", async () => {
    using dir = tempDir();
    const jobs = manager(dir.path);
    const j = await jobs.start({ sessionId: SID, command: "echo hi", cwd: dir.path, env: {}, name: null });
    const pid = jobs.readRows()[0]!.supervisor_pid!;
    // Nobody polls or reconciles: the registry lock is held throughout, so no server could save.
    const blocker = FileLock.tryAcquire(jobsLockPath(dir.path))!;
    await waitFor(() => !pidAlive(pid), { what: "the supervisor to exit" });
    const pending = jobs.journal.pending().updates;
    const records = pending.map((u) => [u.job_id, u.op, (u.data.patch as { status: string }).status]);
    expect(records).toEqual([[j.job_id, "complete", "succeeded"]]);
    expect(savedStatus(dir.path)).toBe("running");
    expect(jobs.readRows()[0]).toMatchObject({ status: "succeeded", exit_code: 0, output_bytes: 3 });
    expect(jobs.currentRows()[0]!.status).toBe("succeeded");
    expect((await jobs.reconcile(SID))[0]!.status).toBe("succeeded");
    expect(jobs.journal.pending().updates.length).toBe(1);
    blocker.release();
    await jobs.mutate(() => undefined);
    expect(savedStatus(dir.path)).toBe("succeeded");
    expect(jobs.readRows()[0]!.applied_updates.length).toBe(1);
    expect(jobs.journal.pending().updates.length).toBe(0);
  }, 20_000);

  test("a terminal update that cannot take the lock is journaled and replayed once", async () => {
    using dir = tempDir();
    const jobs = manager(dir.path);
    const j = await jobs.start({ sessionId: SID, command: "echo hi", cwd: dir.path, env: {}, name: null });
    // Wait for the supervisor to finish without committing (nobody reconciles meanwhile): its status
    // file is written and the supervisor process itself has exited.
    const pid = jobs.readRows()[0]!.supervisor_pid!;
    expect(pid).toBeGreaterThan(0);
    const blocker = FileLock.tryAcquire(jobsLockPath(dir.path))!;
    await waitFor(() => readdirSync(join(dir.path, "jobs", j.job_id)).some((n) => n.endsWith(".status.json")), {
      what: "the job's status file",
    });
    await waitFor(() => !pidAlive(pid), { what: "the supervisor to exit" });
    // As when a supervisor could not write its record: only the status file tells the end.
    for (const u of jobs.journal.pending().updates) jobs.journal.remove(u.id);
    const seen = await jobs.reconcile(SID);
    expect(seen[0]!.status).toBe("succeeded");
    expect(savedStatus(dir.path)).toBe("running");
    expect(jobs.journal.pending().updates.length).toBe(1);
    blocker.release();
    await jobs.mutate(() => undefined);
    const row = jobs.readRows()[0]!;
    expect(row.status).toBe("succeeded");
    expect(row.applied_updates.length).toBe(1);
    expect(jobs.journal.pending().updates.length).toBe(0);
  }, 20_000);
});
