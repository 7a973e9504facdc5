/**
 * Enrollment and the remote_admin tool through two processes of the compiled binary: a controller
 * on loopback and `worker connect` with its own worker state dir.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";
import { type Controller, invite, spawnWorker, startController, startWorker, type Worker } from "../helpers/remote.ts";

describe("remote worker enrollment", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  const workers: Worker[] = [];

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    ctl = await startController({ state: state.path, workspace: ws.path });
  });
  afterAll(async () => {
    for (const w of workers) await w.stop();
    await ctl.stop();
    for (const w of workers) w.root[Symbol.dispose]();
    ws[Symbol.dispose]();
    state[Symbol.dispose]();
  });

  test("an invite enrolls a worker that remote_admin lists online; only hashes are stored", async () => {
    const inv = await invite(ctl.mcp, { name: "alpha" });
    expect(inv.code).toMatch(/^lsmcp_inv_[A-Za-z0-9_-]{32}$/);
    expect(inv.join_url).toBe(`${ctl.url}/join`);
    expect(inv.command).toBe(`curl -fsSL ${ctl.url}/join | bash -s -- --invite ${inv.code} --name alpha`);
    expect(inv.ttl_s).toBe(600);
    const w = await startWorker(ctl.url, inv.code);
    workers.push(w);
    expect(w.name).toBe("alpha");
    const list = (
      await ctl.mcp.ok<{ data: { machines: Array<Record<string, unknown>>; counts: Record<string, number> } }>(
        "remote_admin",
        { action: "list", args: {} },
      )
    ).data;
    expect(list.counts).toEqual({ online: 1, offline: 0, total: 1 });
    expect(list.machines[0]).toMatchObject({ name: "alpha", status: "online", workdir: w.workdir, queue_depth: 0 });
    // The controller keeps digests only: neither the invite nor the worker token is on its disk.
    const identity = JSON.parse(readFileSync(join(w.root.path, "profiles", w.profile, "identity.json"), "utf8"));
    expect(identity.token).toMatch(/^lsmcp_wk_/);
    expect(statSync(join(w.root.path, "profiles", w.profile, "identity.json")).mode & 0o777).toBe(0o600);
    const registry = readFileSync(join(state.path, "remote-workers.json"), "utf8");
    expect(registry).not.toContain(identity.token);
    expect(registry).not.toContain(inv.code);
    expect(registry).toContain(new Bun.CryptoHasher("sha256").update(identity.token).digest("hex"));
    // The audit log records the invite call with the code redacted.
    const audit = await waitFor(
      () => {
        const text = readFileSync(join(state.path, "audit_log", "audit.jsonl"), "utf8");
        return text.includes('"invite"') && text;
      },
      { what: "the invite call in the audit log" },
    );
    expect(audit).not.toContain(inv.code);
  });

  test(
    "an invite works once; a used, expired or unknown invite and a taken name are refused without burning the " +
      "invite",
    async () => {
      const used = await invite(ctl.mcp, {});
      const w = await startWorker(ctl.url, used.code, { name: "beta" });
      workers.push(w);
      const root = tempDir("lsm-worker-");
      const wd = tempDir("lsm-worker-wd-");
      const tryJoin = async (code: string, name?: string) => {
        const p = spawnWorker({
          server: ctl.url,
          invite: code,
          workdir: wd.path,
          root: root.path,
          name,
          mode: "enroll",
        });
        await p.proc.exited;
        return { code: p.proc.exitCode, stderr: p.stderr(), stdout: p.stdout() };
      };
      const again = await tryJoin(used.code);
      expect(again.code).toBe(1);
      expect(again.stderr).toContain("Status: worker command failed: enrollment refused (invite_used");
      expect(again.stderr).not.toContain(used.code);
      expect((await tryJoin("lsmcp_inv_nonsense")).stderr).toContain("invite_invalid");
      const fresh = await invite(ctl.mcp, {});
      expect((await tryJoin(fresh.code, "beta")).stderr).toContain("machine_name_taken");
      // The refused name did not consume the invite.
      const ok = await tryJoin(fresh.code, "gamma");
      expect(ok.code).toBe(0);
      expect(JSON.parse(ok.stdout)).toMatchObject({
        schema_version: 1,
        server: ctl.url,
        name: "gamma",
        workdir: wd.path,
        enrolled: true,
      });
      expect(ok.stdout).not.toContain("lsmcp_");
      root[Symbol.dispose]();
      wd[Symbol.dispose]();
    },
  );
});
