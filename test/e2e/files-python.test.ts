import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, tempDir, type TempDir, stopStateLeftovers } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

// run_python_code in all three modes, and the life of its private temp scripts.
type Job = { job_id: string; status: string; exit_code: number | null; attempts: number };
type JobOut = { jobs: Job[]; outputs: Array<{ job: Job; output: string }>; retried: Job[] };
type Read = {
  output: string;
  status: string;
  exit_code: number | null;
  next_offset: number;
  matched: boolean;
  current_line: string;
};

let dir: TempDir;
let mcp: McpHandle;
let sid: string;
let state: string;

const scriptsDir = () => join(state, "tmp", "python");
const scripts = () =>
  existsSync(scriptsDir())
    ? readdirSync(scriptsDir())
        .filter((n) => n.endsWith(".py"))
        .sort()
    : [];

beforeAll(async () => {
  dir = tempDir("lsm-py-");
  state = join(dir.path, "state");
  mkdirSync(join(dir.path, "ws", "proj"), { recursive: true });
  writeFileSync(join(dir.path, "ws", "proj", "helper.py"), "VALUE = 'from helper'\n");
  mcp = await connectStdio({
    workspace: join(dir.path, "ws"),
    state,
    env: { LOCAL_SHELL_MCP_MAX_JOBS: "2", LOCAL_SHELL_MCP_MAX_TMP_FILES: "3" },
  });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "proj" })).session_id;
});
afterAll(async () => {
  await mcp.close();
  stopStateLeftovers(state);
  dir[Symbol.dispose]();
});

describe("run_python_code modes", () => {
  test("bounded: runs as <script> with the workdir on sys.path, file removed", async () => {
    const r = await mcp.ok<{
      mode: string;
      script_path: string;
      result: { stdout: string; stderr: string; exit_code: number };
    }>("run_python_code", {
      session_id: sid,
      code:
        "import sys, os, helper\nprint(helper.VALUE, sys.argv[0], __file__, __name__, 'LSM_PYTHON_SCRIPT' in " +
        "os.environ)\nraise ValueError('boom')\n",
    });
    expect(r.mode).toBe("command");
    expect(r.script_path).toBe("<script>");
    expect(r.result.stdout).toBe("from helper <script> <script> __main__ False\n");
    expect(r.result.exit_code).toBe(1);
    expect(r.result.stderr).toContain('File "<script>", line 3, in <module>');
    expect(r.result.stderr).toContain("raise ValueError('boom')");
    expect(r.result.stderr).not.toContain(state);
    expect(scripts()).toEqual([]);
    expect(statSync(scriptsDir()).mode & 0o777).toBe(0o700);
  });

  test("async_: a job that outlives the call keeps its private script for retries; pruning sweeps it", async () => {
    const started = await mcp.ok<{
      mode: string;
      command: string;
      result: Job & { command: string; env_keys: string[] };
    }>("run_python_code", {
      session_id: sid,
      code: "import time, helper\ntime.sleep(0.3)\nprint('job says', helper.VALUE)\n",
      async_: true,
      name: "py-job",
    });
    expect(started.mode).toBe("job");
    expect(started.result.command).not.toContain(state);
    const job = started.result.job_id;
    const [script] = scripts();
    expect(script).toBeDefined();
    expect(statSync(join(scriptsDir(), script!)).mode & 0o777).toBe(0o600);
    let polled = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job], wait_s: 30 });
    expect(polled.outputs[0]!.job.status).toBe("succeeded");
    expect(polled.outputs[0]!.output).toContain("job says from helper");
    // Finished but still listed: retry runs the same code again.
    expect(scripts()).toEqual([script!]);
    await mcp.ok<JobOut>("job", { session_id: sid, retry: [job] });
    polled = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job], wait_s: 30 });
    expect(polled.outputs[0]!.job).toMatchObject({ status: "succeeded", attempts: 2 });
    expect(polled.outputs[0]!.output).toContain("job says from helper");
    // Two newer jobs push it out of the registry (max_jobs=2); the next script sweeps its file.
    for (let i = 0; i < 2; i++) {
      const b = await mcp.ok<{ result: Job }>("bash", { session_id: sid, command: "true", async_: true });
      await mcp.ok<JobOut>("job", { session_id: sid, poll: [b.result.job_id], wait_s: 30 });
    }
    await mcp.ok("run_python_code", { session_id: sid, code: "pass" });
    expect(scripts()).toEqual([]);
  }, 60_000);

  test("pty: an interactive script in a persistent shell; its file goes once the shell has exited", async () => {
    const r = await mcp.ok<{ mode: string; result: { shell_id: string } }>("run_python_code", {
      session_id: sid,
      code: "name = input('who? ')\nprint('hello', name)\n",
      pty: true,
      name: "py-pty",
    });
    expect(r.mode).toBe("pty");
    const id = r.result.shell_id;
    let out = await mcp.ok<Read>("read_persistent_shell_output", {
      session_id: sid,
      shell_id: id,
      offset: 0,
      wait_for: "who\\? $",
      timeout_s: 30,
    });
    expect(out.matched).toBe(true);
    expect(scripts()).toHaveLength(1);
    await mcp.ok("send_persistent_shell_input", { session_id: sid, shell_id: id, input_text: "ada" });
    await waitFor(
      async () =>
        (await mcp.ok<Read>("read_persistent_shell_output", { session_id: sid, shell_id: id })).status === "exited",
      { what: "the program to exit" },
    );
    out = await mcp.ok<Read>("read_persistent_shell_output", { session_id: sid, shell_id: id, offset: 0 });
    expect(out.output).toContain("hello ada");
    await mcp.ok("run_python_code", { session_id: sid, code: "pass" });
    expect(scripts()).toEqual([]);
    await mcp.ok("kill_persistent_shell", { session_id: sid, shell_id: id });
  }, 90_000);

  test("max_tmp_files bounds live scripts; finished jobs' scripts give way first", async () => {
    const long = async () =>
      (
        await mcp.ok<{ result: Job }>("run_python_code", {
          session_id: sid,
          code: "import time\ntime.sleep(60)\n",
          async_: true,
        })
      ).result.job_id;
    const a = await long();
    const b = await long();
    const c = await long();
    expect(scripts()).toHaveLength(3);
    expect(await mcp.fails("run_python_code", { session_id: sid, code: "print(1)" })).toBe("tmp_space_exhausted");
    await mcp.ok("job", { session_id: sid, cancel: [a] });
    const ok = await mcp.ok<{ result: { stdout: string } }>("run_python_code", { session_id: sid, code: "print(1)" });
    expect(ok.result.stdout).toBe("1\n");
    expect(scripts()).toHaveLength(2);
    await mcp.ok("job", { session_id: sid, cancel: [b, c] });
  }, 60_000);

  test("a finished job's script goes once its session has ended", async () => {
    const other = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "proj" })).session_id;
    const before = scripts();
    const j = await mcp.ok<{ result: Job }>("run_python_code", {
      session_id: other,
      code: "print('done')",
      async_: true,
    });
    await mcp.ok<JobOut>("job", { session_id: other, poll: [j.result.job_id], wait_s: 30 });
    const mine = scripts().filter((n) => !before.includes(n));
    expect(mine).toHaveLength(1);
    await mcp.ok("session_end", { session_id: other });
    await mcp.ok("run_python_code", { session_id: sid, code: "pass" });
    // The ended session's script is gone; the others are only ever ones that existed before.
    const after = scripts();
    expect(after).not.toContain(mine[0]!);
    expect(after.every((n) => before.includes(n))).toBe(true);
  }, 90_000);
});
