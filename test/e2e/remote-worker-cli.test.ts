/**
 * The worker CLI's guard rails and a controller with remote workers switched off, through the
 * compiled binary.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { binary, serverEnv, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, invite, startController } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

async function worker(
  args: string[],
  root: string,
  stdin: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = Bun.spawn([binary(), "worker", ...args], {
    env: serverEnv({ LOCAL_SHELL_MCP_WORKER_STATE_DIR: root }),
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
  });
  proc.stdin.write(stdin);
  proc.stdin.end();
  await proc.exited;
  return {
    code: proc.exitCode,
    stdout: await new Response(proc.stdout).text(),
    stderr: await new Response(proc.stderr).text(),
  };
}

describe("worker CLI", () => {
  let ws: TempDir;
  let state: TempDir;
  let root: TempDir;
  let ctl: Controller;

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    root = tempDir("lsm-worker-");
    ctl = await startController({ state: state.path, workspace: ws.path });
  });
  afterAll(async () => {
    await ctl.stop();
    for (const d of [ws, state, root]) d[Symbol.dispose]();
  });

  test(
    "--invite-stdin reads one line (CRLF or LF stripped), " + "refuses more than 16 KiB, and nothing secret is printed",
    async () => {
      const code = (await invite(ctl.mcp, {})).code;
      const big = await worker(
        ["enroll", "--server", ctl.url, "--invite-stdin", "--workdir", ws.path],
        root.path,
        "x".repeat(17 * 1024),
      );
      expect(big.code).toBe(1);
      expect(big.stderr).toContain("Status: worker command failed: the invite on stdin is longer than 16 KiB");
      const ok = await worker(
        ["enroll", "--server", ctl.url, "--invite-stdin", "--workdir", ws.path, "--profile", "p_testprofile1"],
        root.path,
        `${code}\r\n`,
      );
      expect(ok.code).toBe(0);
      expect(JSON.parse(ok.stdout)).toEqual({
        schema_version: 1,
        server: ctl.url,
        name: expect.any(String),
        workdir: ws.path,
        profile_id: "p_testprofile1",
        enrolled: true,
      });
      expect(ok.stdout + ok.stderr).not.toContain("lsmcp_");
      // Enrolling the same profile again keeps its identity (no invite needed).
      const again = await worker(["enroll", "--server", ctl.url, "--profile", "p_testprofile1"], root.path, "");
      expect(JSON.parse(again.stdout)).toMatchObject({ profile_id: "p_testprofile1", enrolled: false });
      expect(existsSync(join(root.path, "profiles", "p_testprofile1", "identity.json"))).toBe(true);
    },
  );

  test("a running worker stopped with Ctrl-C (SIGINT) exits 130", async () => {
    const proc = Bun.spawn([binary(), "worker", "run", "p_testprofile1"], {
      env: serverEnv({ LOCAL_SHELL_MCP_WORKER_STATE_DIR: root.path, LOCAL_SHELL_MCP_LOG_LEVEL: "3" }),
      stdin: "ignore",
      stdout: "ignore",
      stderr: "pipe",
    });
    let err = "";
    void (async () => {
      for await (const chunk of proc.stderr) err += new TextDecoder().decode(chunk);
    })();
    await waitFor(() => err.includes("connected to the controller"), { what: "the worker to connect" });
    proc.kill("SIGINT");
    await proc.exited;
    expect(proc.exitCode).toBe(130);
  });

  test("bad arguments fail with one redacted status line and exit 1", async () => {
    const secret = "lsmcp_inv_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345";
    const badServer = await worker(["enroll", "--server", "ftp://x", "--invite", secret], root.path, "");
    expect(badServer).toMatchObject({ code: 1, stdout: "" });
    expect(badServer.stderr.trim()).toBe(
      "Status: worker command failed: --server must be an absolute http(s) URL without credentials, query or fragment",
    );
    const refused = await worker(
      ["enroll", "--server", ctl.url, "--invite", secret, "--workdir", ws.path],
      root.path,
      "",
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("invite_invalid");
    expect(refused.stderr).not.toContain(secret);
    const noInvite = await worker(["enroll", "--server", ctl.url, "--workdir", ws.path], root.path, "");
    expect(noInvite.stderr).toContain("an invite is required");
    const noProfile = await worker(["run", "p_doesnotexist"], root.path, "");
    expect(noProfile.code).toBe(1);
    expect(noProfile.stderr).toContain("has no identity");
  });
});

describe("remote workers switched off", () => {
  test(
    "remote_admin is not offered, remote sessions fail " + "remote_disabled, and the worker routes do not exist",
    async () => {
      using ws = tempDir();
      using state = tempDir();
      const ctl = await startController({ state: state.path, workspace: ws.path, args: ["--remote-enabled", "false"] });
      try {
        const names = (await ctl.mcp.client.listTools()).tools.map((t) => t.name);
        expect(names).not.toContain("remote_admin");
        expect(await ctl.mcp.fails("session_start", { target: "remote", machine: "any", workdir: "." })).toBe(
          "remote_disabled",
        );
        expect((await fetch(`${ctl.url}/remote/register`, { method: "POST", body: "{}" })).status).toBe(404);
        expect((await fetch(`${ctl.url}/remote/channel`)).status).toBe(404);
      } finally {
        await ctl.stop();
      }
    },
  );
});
