/**
 * The long-lived containment runner (`lsm-runner --serve`): bounded commands are forked by one
 * runner per server instead of a fresh runner each. These tests hold it to the per-call runner's
 * guarantees: the runner killed mid-call fails the call closed and the tree still goes; a
 * supervisor killed mid-call leaves nothing running; many concurrent calls share one runner; and
 * the runner keeps no descriptor of a finished call.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, errorCode, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

let ws: TempDir;
let mcp: McpHandle & { pid: () => number | null };
let sid: string;

beforeAll(async () => {
  ws = tempDir("lsm-runner-server-");
  // A private helper cache: another build of the same version on this machine may extract its own
  // runner into the shared one, and an older runner has no server mode (calls then fall back to
  // one runner each, which is safe but not what these tests look at).
  mcp = await connectStdio({
    workspace: ws.path,
    state: join(ws.path, ".state"),
    env: { XDG_CACHE_HOME: join(ws.path, ".cache") },
  });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});
afterAll(async () => {
  await mcp.close();
  ws[Symbol.dispose]();
});

function cmdline(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
  } catch {
    return [];
  }
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    const text = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
    if (text) out.push(...text.split(" ").map(Number));
  }
  return out;
}

/** The server's long-lived runner: its child running `lsm-runner --serve`. */
function runnerServerPid(): number | undefined {
  const server = mcp.pid();
  if (!server) return undefined;
  return childrenOf(server).find((p) => {
    const args = cmdline(p);
    return args.length === 2 && args[0]!.endsWith("lsm-runner") && args[1] === "--serve";
  });
}

const fds = (pid: number) => readdirSync(`/proc/${pid}/fd`).sort();

/** What each descriptor of a process is (pipe:[inode], /dev/null, anon_inode:[signalfd] ...). */
function fdTargets(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  for (const fd of fds(pid)) {
    try {
      out.set(fd, readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed while we looked
    }
  }
  return out;
}

/** The runner's children that run no command: its supervisor forked ahead, waiting for a request. */
function waitingSupervisors(runner: number): number[] {
  return childrenOf(runner).filter((p) => childrenOf(p).length === 0);
}

/**
 * The runner's descriptors beyond stdin, stdout, stderr and its signalfd, each checked to be one
 * end of a pipe of the waiting supervisor (its request pipe, its stdout and stderr), none of a
 * finished call.
 */
function extraFdsAreTheWaitingSupervisors(runner: number): boolean {
  const waiting = waitingSupervisors(runner);
  if (waiting.length !== 1) return false;
  const theirs = new Set(fdTargets(waiting[0]!).values());
  const extra = [...fdTargets(runner)].filter(([fd]) => Number(fd) > 3);
  return (
    fdTargets(runner).get("3")!.includes("signalfd") &&
    extra.length === 3 &&
    extra.every(([, target]) => target.startsWith("pipe:") && theirs.has(target))
  );
}

async function bash(command: string, timeout_s = 30) {
  return (
    await mcp.ok<{ result: { ok: boolean; exit_code: number | null; stdout: string; stderr: string } }>("bash", {
      session_id: sid,
      command,
      timeout_s,
    })
  ).result;
}

/**
 * The long-lived runner, after a call made sure there is one: each test stands on its own, so one
 * that failed after killing the runner leaves the next a fresh runner, not a 20 s wait for none.
 */
async function liveRunner(): Promise<number> {
  expect((await bash("echo warm")).stdout).toBe("warm\n");
  return waitFor(() => runnerServerPid(), { what: "the long-lived runner" });
}

describe("the long-lived runner", () => {
  test(
    "runs bounded commands: one runner for many " + "concurrent calls, which holds no descriptor " + "afterwards",
    async () => {
      expect((await bash("echo warm")).stdout).toBe("warm\n");
      const runner = await waitFor(() => runnerServerPid(), { what: "the long-lived runner to be running" });
      // Between calls it holds its own descriptors and the pipes of the supervisor it forked ahead.
      await waitFor(() => extraFdsAreTheWaitingSupervisors(runner), {
        what: "the runner to hold only its own and its waiting supervisor's descriptors",
      });
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => bash(`echo out-${i}; echo err-${i} >&2; exit ${i % 3}`)),
      );
      results.forEach((r, i) => {
        expect(r.stdout).toBe(`out-${i}\n`);
        expect(r.stderr).toBe(`err-${i}\n`);
        expect(r.exit_code).toBe(i % 3);
      });
      // The same runner served them all (no per-call runner took over), and it is back to its own
      // descriptors (stdin, stdout, stderr, its signalfd) and the next waiting supervisor's pipes,
      // none of any finished call.
      expect(runnerServerPid()).toBe(runner);
      await waitFor(() => extraFdsAreTheWaitingSupervisors(runner), {
        what: "the runner to let go of every finished call's descriptors",
      });
    },
  );

  test("a command starts with no signal ignored or blocked", async () => {
    // The supervisor is forked, not exec'd, from the server: what the server inherited or set up for
    // itself (ignored SIGPIPE, blocked SIGCHLD and stop signals) must not reach the command.
    const r = await bash("grep -E '^Sig(Ign|Blk):' /proc/self/status");
    expect(r.stdout).toBe("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  });

  test("a command's background process is stopped and the call's output is exact", async () => {
    const pidFile = join(ws.path, "bg.pid");
    const r = await bash(`sleep 300 & echo $! > ${pidFile}; echo done`);
    expect(r.stdout).toBe("done\n");
    const bg = Number(readFileSync(pidFile, "utf8"));
    expect(bg).toBeGreaterThan(0);
    // The supervisor confirmed the tree gone before the call returned.
    expect(pidAlive(bg)).toBe(false);
  });

  test("a tree still alive when the shell exits is stopped before the call returns, whatever its shape", async () => {
    // The supervisor confirms an empty tree at once when the kernel reports no child left; these
    // shapes all leave children, in process groups other than the shell's, when the shell exits.
    const f = (name: string) => join(ws.path, `shape-${name}.pid`);
    const quiet = "</dev/null >/dev/null 2>&1";
    const script = [
      "set -m",
      `sh -c 'echo $$ > ${f("job")}; exec sleep 302' ${quiet} &`,
      `(setsid sh -c "trap '' TERM; echo \\$\\$ > ${f("ignorer")}; exec sleep 303" ${quiet} &)`,
      `mkfifo ${f("fifo")}; bash -c 'sleep 304 ${quiet} & echo $! > ${f("orphan")}; read x < ${f("fifo")}' ${quiet} &`,
      `until [ -s ${f("job")} ] && [ -s ${f("ignorer")} ] && [ -s ${f("orphan")} ]; do sleep 0.01; done`,
      `echo go > ${f("fifo")}; echo started`,
    ].join("\n");
    const r = await bash(script);
    expect(r.stdout).toBe("started\n");
    for (const name of ["job", "ignorer", "orphan"]) {
      const pid = Number(readFileSync(f(name), "utf8"));
      expect(pid).toBeGreaterThan(0); // it ran
      expect(pidAlive(pid)).toBe(false);
    }
  });

  test("the runner killed mid-call: the call fails closed, the tree is stopped, and later calls work", async () => {
    const runner = await liveRunner();
    const pidFile = join(ws.path, "victim.pid");
    const call = mcp.call("bash", {
      session_id: sid,
      command: `sleep 300 & echo $! > ${pidFile}; wait`,
      timeout_s: 120,
    });
    const victim = await waitFor(
      () => existsSync(pidFile) && Number(readFileSync(pidFile, "utf8")) > 0 && Number(readFileSync(pidFile, "utf8")),
      { what: "the command to start its sleep" },
    );
    expect(pidAlive(victim)).toBe(true);
    const waiting = await waitFor(() => waitingSupervisors(runner)[0], { what: "a supervisor forked ahead" });
    process.kill(runner, "SIGKILL");
    const r = await call;
    // Nothing proves the tree gone from where the server stands: it must not report success.
    expect(r.isError).toBe(true);
    expect(errorCode(r)).toBe("containment_unconfirmed");
    // The command was still running: the error must not say it finished.
    const text = (r.content[0] as { text: string }).text;
    expect(text).not.toContain("finished,");
    expect(text).toContain("whether it finished is unknown");
    // The supervisor got the parent-death signal and stopped its tree.
    await waitFor(() => !pidAlive(victim), { timeoutMs: 30_000, what: "the orphaned sleep to be stopped" });
    // The supervisor forked ahead saw its request pipe close and exited (it had started nothing).
    await waitFor(
      () => !pidAlive(waiting) || readFileSync(`/proc/${waiting}/stat`, "utf8").split(") ")[1]!.startsWith("Z"),
      { what: "the waiting supervisor to exit" },
    );
    // A new runner takes over for the next call.
    expect((await bash("echo again")).stdout).toBe("again\n");
    const next = await waitFor(() => runnerServerPid(), { what: "a new long-lived runner" });
    expect(next).not.toBe(runner);
  });

  test(
    "a supervisor killed mid-call: its escaped processes are " + "stopped by the runner and the call fails closed",
    async () => {
      const runner = await liveRunner();
      const pidFile = join(ws.path, "escapee.pid");
      // A double fork and setsid: the sleep's parent exits, so it hangs off the supervisor alone.
      const call = mcp.call("bash", {
        session_id: sid,
        command: `(setsid sleep 301 & echo $! > ${pidFile}) ; sleep 300`,
        timeout_s: 120,
      });
      const escapee = await waitFor(
        () => existsSync(pidFile) && Number(readFileSync(pidFile, "utf8")) > 0 && Number(readFileSync(pidFile, "utf8")),
        { what: "the escapee to start" },
      );
      // The call's supervisor is the runner's child with a child of its own (the shell).
      const supervisor = await waitFor(() => childrenOf(runner).find((p) => childrenOf(p).length > 0), {
        what: "the call's supervisor",
      });
      expect(pidAlive(escapee)).toBe(true);
      process.kill(supervisor, "SIGKILL");
      const r = await call;
      expect(r.isError).toBe(true);
      expect(errorCode(r)).toBe("containment_unconfirmed");
      await waitFor(() => !pidAlive(escapee), { timeoutMs: 30_000, what: "the escapee to be stopped" });
      // The runner itself survived and keeps serving.
      expect(runnerServerPid()).toBe(runner);
      expect((await bash("echo still")).stdout).toBe("still\n");
    },
  );

  test("a waiting supervisor killed from outside: nothing had run, and the next calls run contained", async () => {
    const runner = await liveRunner();
    const waiting = await waitFor(() => waitingSupervisors(runner)[0], { what: "a supervisor forked ahead" });
    process.kill(waiting, "SIGKILL");
    // Once the runner has reaped it, the next call lands on a supervisor forked after it. (A request
    // handed over while it is dying fails closed instead: nothing ran, the call ends unconfirmed.)
    await waitFor(() => !childrenOf(runner).includes(waiting), { what: "the runner to reap the killed supervisor" });
    const pidFile = join(ws.path, "after-waiting.pid");
    const r = await bash(`sleep 305 & echo $! > ${pidFile}; echo ran`);
    expect(r.stdout).toBe("ran\n");
    const bg = Number(readFileSync(pidFile, "utf8"));
    expect(bg).toBeGreaterThan(0);
    expect(pidAlive(bg)).toBe(false);
    expect(runnerServerPid()).toBe(runner);
    expect(waitingSupervisors(runner)).not.toContain(waiting);
  });

  test("a working directory removed before the call is reported as missing, and nothing runs", async () => {
    const gone = join(ws.path, "gone");
    await bash(`mkdir -p ${gone}`);
    const s2 = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "gone" })).session_id;
    await bash(`rmdir ${gone}`);
    const r = await mcp.call("bash", { session_id: s2, command: "touch ran" });
    expect(r.isError).toBe(true);
    expect(errorCode(r)).toBe("path_not_found");
    expect(existsSync(join(ws.path, "ran"))).toBe(false);
  });
});

describe("a long-lived runner that keeps dying", () => {
  test("after three deaths every call gets its own runner, and commands still run contained", async () => {
    const dir = tempDir("lsm-runner-server-deaths-");
    const m = await connectStdio({
      workspace: dir.path,
      state: join(dir.path, ".state"),
      env: { XDG_CACHE_HOME: join(dir.path, ".cache") },
    });
    try {
      const s = (await m.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      const serverOf = () => {
        const pid = m.pid();
        return pid ? childrenOf(pid).find((p) => cmdline(p)[1] === "--serve") : undefined;
      };
      const run = async (command: string) =>
        (await m.ok<{ result: { stdout: string } }>("bash", { session_id: s, command })).result.stdout;
      for (let i = 0; i < 3; i++) {
        expect(await run(`echo round-${i}`)).toBe(`round-${i}\n`);
        const runner = await waitFor(() => serverOf(), { what: `long-lived runner ${i + 1}` });
        process.kill(runner, "SIGKILL");
        // Gone from the process table: the server has reaped it, so it knows it is dead.
        await waitFor(() => !existsSync(`/proc/${runner}`), { what: "the runner to be reaped" });
      }
      // The fallback: a per-call runner, visible as the command's parent while it runs.
      const r = await run("cat /proc/$PPID/cmdline | tr '\\0' ' '");
      expect(r).toContain("lsm-runner --grace-ms");
      expect(r).toContain("-- ");
      expect(serverOf()).toBeUndefined();
    } finally {
      await m.close();
      dir[Symbol.dispose]();
    }
  });
});
