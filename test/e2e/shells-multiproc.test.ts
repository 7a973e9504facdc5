import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  connectStdio,
  errorCode,
  type McpHandle,
  processesMatching,
  tempDir,
  type TempDir,
  stopStateLeftovers,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

type Job = { job_id: string; status: string; exit_code: number | null; error: string | null };
type JobOut = { jobs: Job[]; outputs: Array<{ output: string }> };

let dir: TempDir;
let n = 0;
beforeAll(() => {
  dir = tempDir("lsm-multi-");
});
const states: string[] = [];
afterAll(() => {
  for (const st of states) stopStateLeftovers(st);
  dir[Symbol.dispose]();
});

/** A fresh workspace + state dir shared by the servers of one test. */
function shared(env: Record<string, string> = {}) {
  const base = join(dir.path, `t${++n}`);
  mkdirSync(join(base, "ws"), { recursive: true });
  states.push(join(base, "state"));
  return { workspace: join(base, "ws"), state: join(base, "state"), env };
}

const start = async (mcp: McpHandle) =>
  (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;

describe("two serve processes sharing one state dir", () => {
  test("racing for the last shell slot: exactly one wins", async () => {
    const s = shared({ LOCAL_SHELL_MCP_MAX_TMUX_SESSIONS: "1" });
    await using a = await connectStdio(s);
    await using b = await connectStdio(s);
    const [sa, sb] = await Promise.all([start(a), start(b)]);
    const results = await Promise.all([
      a.call("bash", { session_id: sa, command: "sleep 60", pty: true }),
      b.call("bash", { session_id: sb, command: "sleep 60", pty: true }),
    ]);
    expect(results.filter((r) => !r.isError).length).toBe(1);
    const loser = results.find((r) => r.isError)!;
    expect(JSON.stringify(loser.content)).toContain("shell_limit_reached");
    const shells = await a.ok<{ shells: unknown[] }>("list_persistent_shells", {});
    expect(shells.shells.length).toBe(1);
    await a.ok("session_end", { session_id: sa });
    await b.ok("session_end", { session_id: sb });
  }, 90_000);

  /** Starts a job and a persistent shell in `sid` through `mcp`, each a `sleep 300` carrying a marker. */
  function startWork(mcp: McpHandle, sid: string, tag: string) {
    return Promise.all([
      mcp.call("bash", { session_id: sid, command: `exec -a "${tag}""job${process.pid}" sleep 300`, async_: true }),
      mcp.call("bash", { session_id: sid, command: `exec -a "${tag}""pty${process.pid}" sleep 300`, pty: true }),
    ]);
  }
  const running = (tag: string) =>
    processesMatching(`${tag}job${process.pid}`).length + processesMatching(`${tag}pty${process.pid}`).length;

  test("work admitted before the end is stopped by it, from the other server", async () => {
    const s = shared();
    await using a = await connectStdio(s);
    await using b = await connectStdio(s);
    const sid = await start(a);
    const tag = "lsm-before-end-";
    const [w, sh] = await startWork(b, sid, tag);
    expect(w.isError).toBeFalsy();
    expect(sh.isError).toBeFalsy();
    await waitFor(() => running(tag) === 2, { what: "the job and the shell to run" });
    const end = await a.ok<{ stopped_jobs: string[]; stopped_shells: string[] }>("session_end", { session_id: sid });
    expect(end.stopped_jobs).toEqual([(w.structuredContent as { result: Job }).result.job_id]);
    expect(end.stopped_shells.length).toBe(1);
    await waitFor(() => running(tag) === 0, { what: "the job and the shell to be gone" });
    expect(await b.fails("job", { session_id: sid })).toBe("session_not_found");
  }, 60_000);

  test("work arriving after the end is refused, from the other server", async () => {
    const s = shared();
    await using a = await connectStdio(s);
    await using b = await connectStdio(s);
    const sid = await start(a);
    await a.ok("session_end", { session_id: sid });
    const tag = "lsm-after-end-";
    const [w, sh] = await startWork(b, sid, tag);
    expect(w.isError && errorCode(w)).toBe("session_not_found");
    expect(sh.isError && errorCode(sh)).toBe("session_not_found");
    expect(running(tag)).toBe(0);
  }, 60_000);

  test("an end that cannot get the session lock fails session_busy and leaves the session whole", async () => {
    const s = shared();
    await using a = await connectStdio(s);
    const sid = await start(a);
    const tag = "lsm-busy-end-";
    const [w] = await startWork(a, sid, tag);
    expect(w.isError).toBeFalsy();
    await waitFor(() => processesMatching(`${tag}job${process.pid}`).length === 1, { what: "the job to run" });
    // Another holder (as a peer's teardown would be) keeps the lifecycle lock for longer than the
    // end waits for it (10 s); the holder ends when the release file appears.
    const release = join(s.state, "release-lock");
    const held = join(s.state, "lock-held");
    const holder = Bun.spawn([
      "flock",
      "-x",
      join(s.state, "locks", `session-${sid}.lock`),
      "sh",
      "-c",
      `touch ${held}; until [ -e ${release} ]; do sleep 0.05; done`,
    ]);
    try {
      await waitFor(() => existsSync(held), { what: "the outside lock holder" });
      expect(await a.fails("session_end", { session_id: sid })).toBe("session_busy");
      // Nothing was torn down by the failed end.
      expect(processesMatching(`${tag}job${process.pid}`).length).toBe(1);
    } finally {
      writeFileSync(release, "");
      await holder.exited;
    }
    const again = await a.ok<{ ended: boolean; stopped_jobs: string[] }>("session_end", { session_id: sid });
    expect(again.ended).toBe(true);
    expect(again.stopped_jobs.length).toBe(1);
    await waitFor(() => running(tag) === 0, { what: "the session's work to be gone" });
  }, 60_000);

  test("teardown racing new work in the same session leaves nothing orphaned", async () => {
    const s = shared();
    await using a = await connectStdio(s);
    await using b = await connectStdio(s);
    for (let i = 0; i < 4; i++) {
      const sid = await start(a);
      const tag = `lsm-race${i}-`;
      // Whichever wins each race, the outcome below must hold; the tests above make each path
      // happen on purpose.
      const work = startWork(b, sid, tag);
      const end = await a.ok<{ ended: boolean }>("session_end", { session_id: sid });
      expect(end.ended).toBe(true);
      for (const r of await work) expect(r.isError ? errorCode(r) : "started").toMatch(/^(started|session_not_found)$/);
      await waitFor(() => running(tag) === 0, { what: "nothing of the session to be left" });
      expect(await b.fails("job", { session_id: sid })).toBe("session_not_found");
    }
    expect((await a.ok<{ shells: unknown[] }>("list_persistent_shells", {})).shells).toEqual([]);
  }, 60_000);

  test("kill -9 of a server mid-job: the peer keeps tracking it; a dead job is reconciled as lost", async () => {
    const s = shared();
    const a = await connectStdio(s);
    await using b = await connectStdio(s);
    const sid = await start(a);
    const inWorkspace = () =>
      processesMatching("sleep 300").filter((p) => {
        try {
          return readlinkSync(`/proc/${p}/cwd`) === s.workspace;
        } catch {
          return false;
        }
      });
    // The slow job finishes only when told to (a file appears), so it is surely mid-run at the kill.
    const go = join(s.state, "finish-slow-job");
    const slow = (
      await a.ok<{ result: Job }>("bash", {
        session_id: sid,
        command: `until [ -e ${go} ]; do sleep 0.05; done; echo finished`,
        async_: true,
      })
    ).result;
    const doomed = (await a.ok<{ result: Job }>("bash", { session_id: sid, command: "sleep 300", async_: true }))
      .result;
    await waitFor(() => inWorkspace().length > 0, { what: "the doomed job to run" });
    process.kill(a.pid()!, "SIGKILL");
    await a.close();
    const running = await b.ok<JobOut>("job", { session_id: sid, poll: [slow.job_id] });
    expect(running.jobs[0]!.status).toBe("running");
    writeFileSync(go, "");
    // The job outlives its server and is reported finished, not live forever.
    const done = await b.ok<JobOut>("job", { session_id: sid, poll: [slow.job_id], wait_s: 30 });
    expect(done.jobs[0]).toMatchObject({ status: "succeeded", exit_code: 0 });
    expect(done.outputs[0]!.output).toBe("finished");
    // Its supervisor dies without recording a result (as in a crash): the peer sees the released
    // lease and no completion record, and reports the job lost.
    const state = JSON.parse(readFileSync(join(s.state, "jobs.json"), "utf8")) as {
      jobs: Array<{ job_id: string; supervisor_pid: number }>;
    };
    const pid = state.jobs.find((j) => j.job_id === doomed.job_id)!.supervisor_pid;
    process.kill(pid, "SIGKILL");
    const lost = await b.ok<JobOut>("job", { session_id: sid, poll: [doomed.job_id], wait_s: 30 });
    expect(lost.jobs[0]!.status).toBe("lost");
    // The runner under the killed supervisor took the job's processes down with it.
    await waitFor(() => inWorkspace().length === 0, { what: "the lost job's processes to be gone" });
    await b.ok("session_end", { session_id: sid });
  }, 90_000);

  test("shells are invisible to and unaffected by a separate user tmux server", async () => {
    const user = `lsm-user-${process.pid}`;
    expect(
      Bun.spawnSync(["tmux", "-L", user, "-f", "/dev/null", "new-session", "-d", "-s", "foreign", "sleep 120"])
        .exitCode,
    ).toBe(0);
    try {
      const s = shared();
      await using a = await connectStdio(s);
      const sid = await start(a);
      expect((await a.ok<{ shells: unknown[] }>("list_persistent_shells", {})).shells).toEqual([]);
      const r = await a.ok<{ result: { shell_id: string } }>("bash", {
        session_id: sid,
        command: "sleep 60",
        pty: true,
        name: "foreign",
      });
      expect(r.result.shell_id).toBe("foreign");
      const theirs = Bun.spawnSync(["tmux", "-L", user, "list-sessions", "-F", "#{session_name}"])
        .stdout.toString()
        .trim();
      expect(theirs).toBe("foreign");
      await a.ok("kill_persistent_shell", { session_id: sid, shell_id: "foreign" });
      expect(Bun.spawnSync(["tmux", "-L", user, "has-session", "-t", "=foreign"]).exitCode).toBe(0);
    } finally {
      Bun.spawnSync(["tmux", "-L", user, "kill-server"]);
    }
  }, 90_000);

  test("the binary runs persistent shells with no tmux on PATH", async () => {
    const bin = join(dir.path, "bin");
    mkdirSync(bin);
    for (const exe of ["bash", "sh", "sleep", "cat"]) symlinkSync(Bun.which(exe)!, join(bin, exe));
    expect(Bun.which("tmux", { PATH: bin })).toBeNull();
    const s = shared({ PATH: bin });
    await using a = await connectStdio(s);
    const o = await a.ok<{
      session_id: string;
      environment: {
        tools: { tmux: { available: boolean; version: string | null } };
        capabilities: { raw_pty: boolean };
      };
    }>("session_start", { workdir: "." });
    expect(o.environment.tools.tmux).toMatchObject({ available: true, version: "3.5a" });
    expect(o.environment.capabilities.raw_pty).toBe(true);
    const r = await a.ok<{ result: { shell_id: string } }>("bash", {
      session_id: o.session_id,
      command: "cat",
      pty: true,
    });
    await a.ok("send_persistent_shell_input", {
      session_id: o.session_id,
      shell_id: r.result.shell_id,
      input_text: "echo-through-cat",
    });
    const out = await a.ok<{ output: string; matched: boolean }>("read_persistent_shell_output", {
      session_id: o.session_id,
      shell_id: r.result.shell_id,
      wait_for: "^echo-through-cat$",
      timeout_s: 30,
    });
    expect(out.matched).toBe(true);
    await a.ok("session_end", { session_id: o.session_id });
  }, 90_000);
});
