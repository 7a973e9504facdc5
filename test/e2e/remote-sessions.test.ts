/**
 * A remote session runs every session-bound tool on the worker's host: bash (sync and async),
 * jobs, persistent shells, read/edit/patch/search. Controller and worker are separate processes of
 * the compiled binary; the worker runs on "another host" (its own network namespace, reaching the
 * controller only through the https base_url), and its workdir is a directory only it was told about.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

type Orientation = {
  session_id: string;
  target: string;
  machine: string | null;
  workdir: string;
  workspace_root: string;
  environment: Record<string, Record<string, unknown>>;
};
type Bash = {
  mode: string;
  cwd: string;
  result: { exit_code: number; stdout: string; job_id?: string; shell_id?: string };
};

describe.skipIf(needsRoot("the worker runs in its own network namespace (ip netns, veth)"))("remote sessions", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let worker: Worker;
  let sid: string;

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    ctl = await startController({ state: state.path, workspace: ws.path, net: true });
    worker = await enrolWorker(ctl, "box", { netns: true });
    writeFileSync(join(worker.workdir, "notes.txt"), "alpha\nbeta\ngamma\n");
  });
  afterAll(async () => {
    await worker?.stop();
    await ctl?.dispose();
    worker?.root[Symbol.dispose]();
    ws[Symbol.dispose]();
    state[Symbol.dispose]();
  });

  test(
    "session_start(target=remote) returns the worker's " + "orientation rebound to the controller's session",
    async () => {
      const o = await ctl.mcp.ok<Orientation>("session_start", {
        target: "remote",
        machine: "box",
        workdir: worker.workdir,
      });
      sid = o.session_id;
      expect(o).toMatchObject({
        target: "remote",
        machine: "box",
        workdir: worker.workdir,
        workspace_root: worker.workdir,
      });
      expect(o.environment.workspace).toMatchObject({
        target: "remote",
        machine: "box",
        worker_runtime: { active: true, bundle_version: null, service_kind: "manual", service_status: "running" },
      });
      expect(o.environment.capabilities!.remote_worker).toBe(true);
      // base_url is the https origin and the worker speaks the gateway: transfers may use it.
      expect(o.environment.capabilities!.http_transfer).toBe(true);
      // The worker runs with full control (its operator enrolled it to be driven).
      expect(o.environment.policy!.full_control).toBe(true);
      // The controller's own session record names the worker's session; the worker has its own.
      const rec = JSON.parse(readFileSync(join(state.path, "sessions", sid, "session.json"), "utf8"));
      expect(rec).toMatchObject({ target: "remote", machine: "box", workdir: worker.workdir });
      expect(rec.worker_session_id).not.toBe(sid);
      expect(
        existsSync(
          join(
            worker.root.path,
            "profiles",
            worker.profile,
            "state",
            "sessions",
            rec.worker_session_id,
            "session.json",
          ),
        ),
      ).toBe(true);
    },
  );

  test("bash runs on the worker, in its workdir, on its host", async () => {
    const r = await ctl.mcp.ok<Bash>("bash", {
      session_id: sid,
      command: "pwd; echo $LOCAL_SHELL_MCP_WORKER_STATE_DIR; ip -4 -o addr show scope global | awk '{print $4}'",
    });
    expect(r.mode).toBe("command");
    expect(r.result.exit_code).toBe(0);
    const [pwd, stateDir, ...addrs] = r.result.stdout.trimEnd().split("\n");
    expect(pwd).toBe(worker.workdir);
    // The worker's own LOCAL_SHELL_MCP_* environment (where its identity lives) is not passed on.
    expect(stateDir).toBe("");
    // It ran in the worker's namespace: the only address there is the private link's.
    expect(addrs).toEqual([`${worker.ns!.nsAddr}/30`]);
    // The worker records the call in its own audit log, as transport "worker".
    const workerAudit = join(worker.root.path, "profiles", worker.profile, "state", "audit_log", "audit.jsonl");
    await waitFor(() => existsSync(workerAudit) && readFileSync(workerAudit, "utf8").includes('"transport":"worker"'), {
      what: "the worker's audit record",
    });
    // An error on the worker comes back with its stable code.
    expect(await ctl.mcp.fails("read", { session_id: sid, path: "missing.txt" })).toBe("path_not_found");
    // Download links need the controller's listener: refused plainly on a remote session.
    expect(await ctl.mcp.fails("create_file_link", { session_id: sid, path: "notes.txt" })).toBe("remote_unsupported");
  });

  test("files: read, edit_lines, apply_patch, write_file, search all act on the worker's files", async () => {
    const read = await ctl.mcp.ok<{ kind: string; content: string; file: { snapshot_id: string } }>("read", {
      session_id: sid,
      path: "notes.txt",
    });
    expect(read.kind).toBe("file");
    expect(JSON.stringify(read)).toContain("beta");
    await ctl.mcp.ok("edit_lines", {
      session_id: sid,
      path: "notes.txt",
      start_line: 2,
      end_line: 2,
      replacement: "BETA\n",
      snapshot_id: read.file.snapshot_id,
    });
    expect(readFileSync(join(worker.workdir, "notes.txt"), "utf8")).toBe("alpha\nBETA\ngamma\n");
    await ctl.mcp.ok("apply_patch", {
      session_id: sid,
      patch: "*** Begin Patch\n*** Update File: notes.txt\n@@\n alpha\n BETA\n-gamma\n+GAMMA\n*** End Patch",
    });
    expect(readFileSync(join(worker.workdir, "notes.txt"), "utf8")).toBe("alpha\nBETA\nGAMMA\n");
    await ctl.mcp.ok("write_file", { session_id: sid, path: "sub/new.txt", content: "needle here\n" });
    expect(readFileSync(join(worker.workdir, "sub", "new.txt"), "utf8")).toBe("needle here\n");
    const found = await ctl.mcp.ok("search", { session_id: sid, pattern: "needle" });
    expect(JSON.stringify(found)).toContain("sub/new.txt");
  });

  test("async bash and job poll run on the worker; ids in results name the controller's session", async () => {
    const started = await ctl.mcp.ok<Bash>("bash", { session_id: sid, command: "echo from-job; exit 3", async_: true });
    expect(started.mode).toBe("job");
    const jobId = started.result.job_id!;
    const done = await ctl.mcp.ok<{
      jobs: Array<{ status: string; exit_code: number; session_id: string }>;
      outputs: Array<{ output: string }>;
    }>("job", { session_id: sid, poll: [jobId], wait_s: 30 });
    expect(done.jobs[0]).toMatchObject({ status: "failed", exit_code: 3, session_id: sid });
    expect(done.outputs[0]!.output).toBe("from-job");
  });

  test("persistent shells run on the worker", async () => {
    const started = await ctl.mcp.ok<Bash>("bash", { session_id: sid, command: "bash --norc", pty: true });
    expect(started.mode).toBe("pty");
    const shellId = started.result.shell_id!;
    await ctl.mcp.ok("send_persistent_shell_input", {
      session_id: sid,
      shell_id: shellId,
      input_text: "echo remote-$((40+2))",
    });
    await waitFor(
      async () =>
        (
          await ctl.mcp.ok<{ output: string }>("read_persistent_shell_output", {
            session_id: sid,
            shell_id: shellId,
            lines: 200,
          })
        ).output.includes("remote-42"),
      {
        what: "the shell's echo",
      },
    );
    const listed = await ctl.mcp.ok<{ shells: Array<{ shell_id: string; session_id: string }> }>(
      "list_persistent_shells",
      { session_id: sid },
    );
    expect(listed.shells.map((s) => s.shell_id)).toContain(shellId);
    expect(listed.shells.every((s) => s.session_id === sid)).toBe(true);
    await ctl.mcp.ok("kill_persistent_shell", { session_id: sid, shell_id: shellId });
  });

  test("the shell tools find a worker's shell by shell_id alone, as they find a local one", async () => {
    const shellId = (await ctl.mcp.ok<Bash>("bash", { session_id: sid, command: "bash --norc", pty: true })).result
      .shell_id!;
    // No session_id from here on: the controller remembers which remote session made the shell.
    await ctl.mcp.ok("send_persistent_shell_input", { shell_id: shellId, input_text: "echo by-id-$((6*7))" });
    await waitFor(
      async () =>
        (
          await ctl.mcp.ok<{ output: string }>("read_persistent_shell_output", { shell_id: shellId, lines: 200 })
        ).output.includes("by-id-42"),
      {
        what: "the echo read by shell_id alone",
      },
    );
    await ctl.mcp.ok("resize_persistent_shell", { shell_id: shellId, cols: 100, rows: 30 });
    const sized = await ctl.mcp.ok<{ shells: Array<{ shell_id: string; cols: number; rows: number }> }>(
      "list_persistent_shells",
      { session_id: sid },
    );
    expect(sized.shells.find((s) => s.shell_id === shellId)).toMatchObject({ cols: 100, rows: 30 });
    // The shell really is on the worker: the controller's own tmux has no such shell.
    const local = await ctl.mcp.ok<{ shells: Array<{ shell_id: string }> }>("list_persistent_shells", {});
    expect(local.shells.map((s) => s.shell_id)).not.toContain(shellId);
    expect(
      await ctl.mcp
        .call("kill_persistent_shell", { shell_id: shellId })
        .then((r) => (r.structuredContent as { killed: boolean }).killed),
    ).toBe(true);
    // Once killed, the id is forgotten and answers like any unknown shell.
    expect(await ctl.mcp.fails("read_persistent_shell_output", { shell_id: shellId })).toBe("shell_not_found");
  });

  test("session_change_cwd moves the session on the worker and returns its rebound orientation", async () => {
    const o = await ctl.mcp.ok<Orientation>("session_change_cwd", { session_id: sid, workdir: "sub" });
    expect(o).toMatchObject({
      session_id: sid,
      target: "remote",
      machine: "box",
      workdir: join(worker.workdir, "sub"),
    });
    expect((await ctl.mcp.ok<Bash>("bash", { session_id: sid, command: "pwd" })).result.stdout).toBe(
      `${join(worker.workdir, "sub")}\n`,
    );
    const rec = JSON.parse(readFileSync(join(state.path, "sessions", sid, "session.json"), "utf8"));
    expect(rec.workdir).toBe(join(worker.workdir, "sub"));
  });

  test("session_end ends the session on both sides", async () => {
    const rec = JSON.parse(readFileSync(join(state.path, "sessions", sid, "session.json"), "utf8"));
    const ended = await ctl.mcp.ok("session_end", { session_id: sid });
    expect(ended).toMatchObject({
      session_id: sid,
      target: "remote",
      machine: "box",
      ended: true,
      remote_cleanup_succeeded: true,
      force_released: false,
    });
    expect(existsSync(join(state.path, "sessions", sid))).toBe(false);
    expect(
      existsSync(join(worker.root.path, "profiles", worker.profile, "state", "sessions", rec.worker_session_id)),
    ).toBe(false);
    expect(await ctl.mcp.fails("bash", { session_id: sid, command: "true" })).toBe("session_not_found");
  });
});
