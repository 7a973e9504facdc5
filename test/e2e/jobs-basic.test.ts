import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  connectStdio,
  type McpHandle,
  processesMatching,
  tempDir,
  type TempDir,
  stopStateLeftovers,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

type Job = { job_id: string; status: string; exit_code: number | null; attempts: number; output_bytes: number };
type JobOut = {
  operation: string;
  jobs: Job[];
  outputs: Array<{ job: Job; output: string; message: string | null }>;
  cancelled: Array<{ job: Job; killed: boolean }>;
  retried: Job[];
};

let dir: TempDir;
let server: ServerParts;
interface ServerParts {
  workspace: string;
  state: string;
}

beforeAll(() => {
  dir = tempDir("lsm-jobs-");
  server = { workspace: join(dir.path, "ws"), state: join(dir.path, "state") };
  mkdirSync(server.workspace);
});
afterAll(() => {
  stopStateLeftovers(server.state);
  dir[Symbol.dispose]();
});

async function startJob(mcp: McpHandle, sid: string, command: string, env?: Record<string, string>): Promise<Job> {
  const r = await mcp.ok<{ mode: string; result: Job }>("bash", {
    session_id: sid,
    command,
    async_: true,
    ...(env ? { env } : {}),
  });
  expect(r.mode).toBe("job");
  return r.result;
}

describe("background jobs through the binary", () => {
  test("a dev server started async is polled and cancelled with nothing left behind", async () => {
    await using mcp = await connectStdio(server);
    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    const marker = `lsm-devserver-${process.pid}`;
    // The marker is split in the command text so only the started process carries it whole.
    const job = await startJob(
      mcp,
      sid,
      `echo starting; bash -c 'exec -a "$0" sleep 300' "lsm-devserver-""${process.pid}" & echo "listening ` +
        `on \${PORT_HINT}"; wait`,
      { PORT_HINT: "4242" },
    );
    expect(job.status).toBe("running");
    // Polled until the server said it listens (the job's output, not a clock, says when).
    const polled = await waitFor(
      async () => {
        const p = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job.job_id], wait_s: 1 });
        return p.outputs[0]!.output.includes("listening on 4242") ? p : undefined;
      },
      { what: "the job to print its listening line" },
    );
    expect(polled.outputs[0]!.job.status).toBe("running");
    await waitFor(() => processesMatching(marker).length === 1, { what: "the dev server process to run" });
    const cancelled = await mcp.ok<JobOut>("job", { session_id: sid, cancel: [job.job_id] });
    expect(cancelled.cancelled[0]!.killed).toBe(true);
    expect(cancelled.cancelled[0]!.job.status).toBe("stopped");
    await waitFor(() => processesMatching(marker).length === 0, { what: "the cancelled job's processes to be gone" });
    const list = await mcp.ok<JobOut & { counts: Record<string, number> }>("job", { session_id: sid });
    expect(list.counts).toEqual({ stopped: 1 });
  }, 90_000);

  test("a job survives a server restart, finishes, and can be retried", async () => {
    let sid: string;
    let job: Job;
    const go = join(dir.path, "restart-job-may-finish");
    {
      await using mcp = await connectStdio(server);
      sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      // The job finishes only once told to (a file appears), so it is surely running across the restart.
      job = await startJob(mcp, sid, `until [ -e ${go} ]; do sleep 0.05; done; echo "done $RUN_TAG"; exit 3`, {
        RUN_TAG: "tag1",
      });
    }
    // The first server is gone; a new one sees the job still running, then finished.
    await using mcp = await connectStdio(server);
    const running = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job.job_id] });
    expect(running.jobs[0]!.status).toBe("running");
    writeFileSync(go, "");
    const done = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job.job_id], wait_s: 30 });
    expect(done.jobs[0]).toMatchObject({ status: "failed", exit_code: 3 });
    expect(done.outputs[0]!.output).toBe("done tag1");
    expect(done.outputs[0]!.message).toBe("job completed with exit code 3");
    expect(await mcp.fails("job", { session_id: sid, retry: [job.job_id], cancel: [job.job_id] })).toBe(
      "invalid_arguments",
    );
    // The second attempt waits for the file again, so it is surely still active when retried twice.
    rmSync(go);
    const retried = await mcp.ok<JobOut>("job", { session_id: sid, retry: [job.job_id] });
    expect(retried.retried[0]).toMatchObject({ job_id: job.job_id, attempts: 2 });
    expect(await mcp.fails("job", { session_id: sid, retry: [job.job_id] })).toBe("job_still_active");
    writeFileSync(go, "");
    const again = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job.job_id], wait_s: 30 });
    expect(again.jobs[0]).toMatchObject({ status: "failed", exit_code: 3, attempts: 2 });
    expect(again.outputs[0]!.output).toBe("done tag1");
    expect(await mcp.fails("job", { session_id: sid, poll: ["job_000000000000"] })).toBe("job_not_found");
  }, 90_000);

  test("nothing a job starts outlives it when the job completes on its own", async () => {
    await using mcp = await connectStdio(server);
    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    const tag = `5${process.pid % 1000}${Date.now() % 100000}`;
    const marks = join(dir.path, `marks-${tag}`);
    mkdirSync(marks);
    // Three leftovers in the usual escape shapes; each records its pid once it runs, and the job
    // ends (exit 0) only after all three are up.
    const sleeper = (i: number) => `sh -c 'echo $$ > ${marks}/${i}; exec sleep ${tag}${i}'`;
    const command = [
      `setsid ${sleeper(1)} >/dev/null 2>&1 < /dev/null &`,
      `( ( ${sleeper(2)} >/dev/null 2>&1 < /dev/null & ) & )`,
      `nohup ${sleeper(3)} >/dev/null 2>&1 < /dev/null &`,
      `until [ -s ${marks}/1 ] && [ -s ${marks}/2 ] && [ -s ${marks}/3 ]; do sleep 0.01; done`,
      "echo all-up",
    ].join("\n");
    const job = await startJob(mcp, sid, command);
    const done = await mcp.ok<JobOut>("job", { session_id: sid, poll: [job.job_id], wait_s: 30 });
    expect(done.jobs[0]).toMatchObject({ status: "succeeded", exit_code: 0 });
    expect(done.outputs[0]!.output).toBe("all-up");
    expect(readdirSync(marks).sort()).toEqual(["1", "2", "3"]); // all three really ran
    await waitFor(() => processesMatching(`sleep ${tag}`).length === 0, {
      what: "the completed job's leftovers to be gone",
    });
    await mcp.ok("session_end", { session_id: sid });
  }, 60_000);

  test("session_end stops the session's jobs", async () => {
    await using mcp = await connectStdio(server);
    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    const marker = `lsm-endjob-${process.pid}`;
    const job = await startJob(mcp, sid, `exec -a "lsm-endjob-""${process.pid}" sleep 300`);
    await waitFor(() => processesMatching(marker).length === 1, { what: "the job to run" });
    const end = await mcp.ok<{ stopped_jobs: string[] }>("session_end", { session_id: sid });
    expect(end.stopped_jobs).toEqual([job.job_id]);
    expect(processesMatching(marker).length).toBe(0);
  }, 90_000);
});
