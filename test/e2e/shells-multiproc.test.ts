import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, readlinkSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, eventually, type McpHandle, processesMatching, tempDir, type TempDir, stopStateLeftovers } from "../helpers/harness.ts";



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

const start = async (mcp: McpHandle) => (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;

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
  }, 30_000);

  test("teardown racing new work in the same session leaves nothing orphaned", async () => {
    const s = shared();
    await using a = await connectStdio(s);
    await using b = await connectStdio(s);
    for (let i = 0; i < 4; i++) {
      const sid = await start(a);
      const tag = `lsm-race${i}-`;
      const work = b.call("bash", { session_id: sid, command: `exec -a "${tag}""${process.pid}" sleep 300`, async_: true });
      const shell = b.call("bash", { session_id: sid, command: `exec -a "${tag}""pty${process.pid}" sleep 300`, pty: true });
      await Bun.sleep(i * 15);
      const end = await a.call("session_end", { session_id: sid });
      const [w, sh] = await Promise.all([work, shell]);
      if (end.isError) {
        // The end lost the lock race; a second end must clean up whatever was started.
        const again = await a.ok<{ ended: boolean }>("session_end", { session_id: sid });
        expect(again.ended).toBe(true);
      }
      for (const r of [w, sh]) if (r.isError) expect(JSON.stringify(r.content)).toMatch(/session_not_found|session_busy/);
      expect(await eventually(() => processesMatching(`${tag}${process.pid}`).length === 0 && processesMatching(`${tag}pty${process.pid}`).length === 0, 8000)).toBe(true);
      expect(await b.fails("job", { session_id: sid })).toBe("session_not_found");
    }
    expect((await a.ok<{ shells: unknown[] }>("list_persistent_shells", {})).shells).toEqual([]);
  }, 60_000);

  test("kill -9 of a server mid-job: the peer keeps tracking it; a dead job is reconciled as lost", async () => {
    const s = shared();
    const a = await connectStdio(s);
    await using b = await connectStdio(s);
    const sid = await start(a);
    const slow = (await a.ok<{ result: Job }>("bash", { session_id: sid, command: "sleep 1.5; echo finished", async_: true })).result;
    const doomed = (await a.ok<{ result: Job }>("bash", { session_id: sid, command: "sleep 300", async_: true })).result;
    process.kill(a.pid()!, "SIGKILL");
    await a.close();
    // The job outlives its server and is reported finished, not live forever.
    const done = await b.ok<JobOut>("job", { session_id: sid, poll: [slow.job_id], wait_s: 15 });
    expect(done.jobs[0]).toMatchObject({ status: "succeeded", exit_code: 0 });
    expect(done.outputs[0]!.output).toBe("finished");
    // Its supervisor dies without recording a result (as in a crash): the peer sees the released
    // lease and no completion record, and reports the job lost.
    const state = JSON.parse(readFileSync(join(s.state, "jobs.json"), "utf8")) as { jobs: Array<{ job_id: string; supervisor_pid: number }> };
    const pid = state.jobs.find((j) => j.job_id === doomed.job_id)!.supervisor_pid;
    process.kill(pid, "SIGKILL");
    const lost = await b.ok<JobOut>("job", { session_id: sid, poll: [doomed.job_id], wait_s: 10 });
    expect(lost.jobs[0]!.status).toBe("lost");
    // The runner under the killed supervisor took the job's processes down with it.
    const inWorkspace = () =>
      processesMatching("sleep 300").filter((p) => {
        try {
          return readlinkSync(`/proc/${p}/cwd`) === s.workspace;
        } catch {
          return false;
        }
      });
    expect(await eventually(() => inWorkspace().length === 0, 5000)).toBe(true);
    await b.ok("session_end", { session_id: sid });
  }, 40_000);

  test("shells are invisible to and unaffected by a separate user tmux server", async () => {
    const user = `lsm-user-${process.pid}`;
    expect(Bun.spawnSync(["tmux", "-L", user, "-f", "/dev/null", "new-session", "-d", "-s", "foreign", "sleep 120"]).exitCode).toBe(0);
    try {
      const s = shared();
      await using a = await connectStdio(s);
      const sid = await start(a);
      expect((await a.ok<{ shells: unknown[] }>("list_persistent_shells", {})).shells).toEqual([]);
      const r = await a.ok<{ result: { shell_id: string } }>("bash", { session_id: sid, command: "sleep 60", pty: true, name: "foreign" });
      expect(r.result.shell_id).toBe("foreign");
      const theirs = Bun.spawnSync(["tmux", "-L", user, "list-sessions", "-F", "#{session_name}"]).stdout.toString().trim();
      expect(theirs).toBe("foreign");
      await a.ok("kill_persistent_shell", { session_id: sid, shell_id: "foreign" });
      expect(Bun.spawnSync(["tmux", "-L", user, "has-session", "-t", "=foreign"]).exitCode).toBe(0);
    } finally {
      Bun.spawnSync(["tmux", "-L", user, "kill-server"]);
    }
  }, 30_000);

  test("the binary runs persistent shells with no tmux on PATH", async () => {
    const bin = join(dir.path, "bin");
    mkdirSync(bin);
    for (const exe of ["bash", "sh", "sleep", "cat"]) symlinkSync(Bun.which(exe)!, join(bin, exe));
    expect(Bun.which("tmux", { PATH: bin })).toBeNull();
    const s = shared({ PATH: bin });
    await using a = await connectStdio(s);
    const o = await a.ok<{ session_id: string; environment: { tools: { tmux: { available: boolean; version: string | null } }; capabilities: { raw_pty: boolean } } }>("session_start", { workdir: "." });
    expect(o.environment.tools.tmux).toMatchObject({ available: true, version: "3.5a" });
    expect(o.environment.capabilities.raw_pty).toBe(true);
    const r = await a.ok<{ result: { shell_id: string } }>("bash", { session_id: o.session_id, command: "cat", pty: true });
    await a.ok("send_persistent_shell_input", { session_id: o.session_id, shell_id: r.result.shell_id, input_text: "echo-through-cat" });
    const out = await a.ok<{ output: string; matched: boolean }>("read_persistent_shell_output", { session_id: o.session_id, shell_id: r.result.shell_id, wait_for: "^echo-through-cat$", timeout_s: 10 });
    expect(out.matched).toBe(true);
    await a.ok("session_end", { session_id: o.session_id });
  }, 30_000);
});
