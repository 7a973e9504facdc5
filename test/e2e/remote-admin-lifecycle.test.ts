/**
 * The lifecycle remote_admin manages, through the compiled binary: invites that outlive a
 * controller restart or expire, rename, reconnect_command, and revocation (the channel closes at
 * once, in-flight calls fail, the worker exits 78 and its token is refused before any upgrade).
 * The revoked worker runs on "another host" (its own network namespace, through the TLS proxy at
 * base_url), so the close travels the same way a real one does; the rest stays on loopback.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { IS_ROOT, needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, invite, spawnWorker, startController, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

type List = {
  data: {
    machines: Array<{ name: string; status: string; profile_id: string | null; reconnect_command: string | null }>;
  };
};

describe("remote_admin lifecycle", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let survivorRoot = "";
  const workers: Worker[] = [];
  const dirs: TempDir[] = [];

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    ctl = await startController({ state: state.path, workspace: ws.path, net: IS_ROOT });
  });
  afterAll(async () => {
    for (const w of workers) await w.stop();
    await ctl?.dispose();
    for (const d of [...workers.map((w) => w.root), ...dirs, ws, state]) d[Symbol.dispose]();
  });

  async function enroll(code: string, name?: string) {
    const root = tempDir("lsm-worker-");
    const wd = tempDir("lsm-worker-wd-");
    dirs.push(root, wd);
    const p = spawnWorker({ server: ctl.url, invite: code, workdir: wd.path, root: root.path, name, mode: "enroll" });
    await p.proc.exited;
    return { exit: p.proc.exitCode, stderr: p.stderr(), stdout: p.stdout(), root: root.path };
  }

  test(
    "an invite survives a controller restart (stored as a " + "digest with its expiry); an expired one is refused",
    async () => {
      const kept = await invite(ctl.mcp, { name: "survivor" });
      const expiring = await invite(ctl.mcp, { ttl_s: 5 });
      // TTLs are clamped to [60, 86400].
      expect(expiring.ttl_s).toBe(60);
      await ctl.stop();
      ctl = await startController({ state: state.path, workspace: ws.path, net: ctl.net });
      const r = await enroll(kept.code);
      expect(r.exit).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ name: "survivor", enrolled: true });
      survivorRoot = r.root;
      // Expiry is enforced from the stored record: move it into the past rather than wait a minute.
      const file = join(state.path, "remote-workers.json");
      const doc = JSON.parse(readFileSync(file, "utf8"));
      for (const i of doc.invites) if (!i.used) i.expires_at = Date.now() / 1000 - 1;
      writeFileSync(file, JSON.stringify(doc));
      const late = await enroll(expiring.code);
      expect(late.exit).toBe(1);
      expect(late.stderr).toContain("invite_expired");
    },
  );

  test(
    "rename keeps the worker connected under its new name; " + "reconnect_command names its launcher and profile",
    async () => {
      const root = tempDir("lsm-worker-");
      // A stable launcher, as the installer leaves it: the worker reports its path.
      writeFileSync(join(root.path, "run"), "#!/bin/sh\n");
      chmodSync(join(root.path, "run"), 0o700);
      const wd = tempDir("lsm-worker-wd-");
      dirs.push(root, wd);
      const code = (await invite(ctl.mcp, {})).code;
      const p = spawnWorker({ server: ctl.url, invite: code, workdir: wd.path, root: root.path, name: "old-name" });
      const stop = async () => {
        p.proc.kill();
        await p.proc.exited;
      };
      workers.push({ stop, root: { path: root.path, [Symbol.dispose]: () => undefined } } as Worker);
      await waitFor(() => p.stderr().includes("connected to the controller as old-name"), {
        what: "the worker to connect",
      });
      const before = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "old-name",
          workdir: wd.path,
        })
      ).session_id;
      const profile = JSON.parse(p.stdout().split("\n")[0]!).profile_id as string;
      const rc = await ctl.mcp.ok<{ data: { machine: string; profile_id: string; command: string } }>("remote_admin", {
        action: "reconnect_command",
        args: { machine: "old-name" },
      });
      expect(rc.data).toEqual({
        machine: "old-name",
        profile_id: profile,
        command: `${join(root.path, "run")} ${profile}`,
      });
      // A call running across the rename still gets its result (the link is re-made under the new name).
      // It runs until the test releases it, after the rename.
      const hold = "touch .across-started; while [ ! -e .across-release ]; do sleep 0.05; done; echo across";
      const holding = { session_id: before, command: hold, timeout_s: 60 };
      const across = ctl.mcp.ok<{ result: { stdout: string } }>("bash", holding);
      await waitFor(() => existsSync(join(wd.path, ".across-started")), {
        what: "the call to be running on the worker",
      });
      const renamed = await ctl.mcp.ok<{ data: Record<string, string> }>("remote_admin", {
        action: "rename",
        args: { machine: "old-name", new_name: "new-name" },
      });
      expect(renamed.data).toEqual({ old_name: "old-name", new_name: "new-name" });
      // Listed at once, while the worker re-makes its link under the new name: online, never offline.
      const atOnce = await ctl.mcp.ok<List>("remote_admin", { action: "list", args: {} });
      expect(atOnce.data.machines.find((m) => m.name === "new-name")).toMatchObject({ status: "online" });
      writeFileSync(join(wd.path, ".across-release"), "");
      expect((await across).result.stdout).toBe("across\n");
      await waitFor(() => p.stderr().includes("connected to the controller as new-name"), {
        what: "the worker to reconnect under its new name",
      });
      const list = await ctl.mcp.ok<List>("remote_admin", { action: "list", args: {} });
      expect(list.data.machines.find((m) => m.name === "new-name")).toMatchObject({
        status: "online",
        profile_id: profile,
      });
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "new-name",
          workdir: wd.path,
        })
      ).session_id;
      expect(
        (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo renamed-ok" }))
          .result.stdout,
      ).toBe("renamed-ok\n");
      // A session started before the rename follows its machine.
      expect(await ctl.mcp.ok("bash", { session_id: before, command: "true" })).toMatchObject({ mode: "command" });
      expect(
        await ctl.mcp.fails("remote_admin", { action: "rename", args: { machine: "new-name", new_name: "a/b" } }),
      ).toBe("invalid_arguments");
      expect(
        await ctl.mcp.fails("remote_admin", { action: "rename", args: { machine: "nobody", new_name: "x" } }),
      ).toBe("remote_machine_not_found");
    },
  );

  test.skipIf(needsRoot("the revoked worker runs in its own network namespace (ip netns, veth)"))(
    "revocation closes the channel at once, fails the call in flight, the worker exits 78 and its token is refused",
    async () => {
      const w = await enrolWorker(ctl, "doomed", { netns: true });
      workers.push(w);
      const token = JSON.parse(readFileSync(join(w.root.path, "profiles", w.profile, "identity.json"), "utf8"))
        .token as string;
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "doomed",
          workdir: w.workdir,
        })
      ).session_id;
      const running = ctl.mcp.call("bash", { session_id: sid, command: "touch .doomed-on; sleep 30", timeout_s: 60 });
      await waitFor(() => existsSync(join(w.workdir, ".doomed-on")), { what: "the call to run on the worker" });
      const started = performance.now();
      await ctl.mcp.ok("remote_admin", { action: "revoke", args: { machine: "doomed" } });
      const inflight = await running;
      expect(inflight.isError).toBe(true);
      expect(JSON.stringify(inflight.content)).toContain("remote_worker_revoked");
      await waitFor(() => w.proc.exitCode !== null, { timeoutMs: 20_000, what: "the revoked worker to exit" });
      // The spec bound is 1 s; 3 s leaves room for a loaded 2-core machine.
      expect(performance.now() - started).toBeLessThan(3000);
      expect(w.proc.exitCode).toBe(78);
      // Printed just before the exit; the pipe may be read after the exit is seen.
      await waitFor(() => w.stderr().includes("revoked"), {
        timeoutMs: 10_000,
        what: "the worker to say it was revoked",
      });
      // The identity is kept on disk (nothing deleted), but the controller refuses the token before upgrading.
      expect(readFileSync(join(w.root.path, "profiles", w.profile, "identity.json"), "utf8")).toContain(token);
      const refused = await fetch(`${ctl.url}/remote/channel`, {
        headers: {
          authorization: `Bearer ${token}`,
          upgrade: "websocket",
          connection: "Upgrade",
          "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
          "sec-websocket-version": "13",
        },
      });
      expect(refused.status).toBe(401);
      expect(await ctl.mcp.fails("bash", { session_id: sid, command: "true" })).toBe("remote_machine_not_found");
    },
  );

  test("at most 1,024 invites may be pending", async () => {
    const file = join(state.path, "remote-workers.json");
    const doc = JSON.parse(readFileSync(file, "utf8"));
    const t = Date.now() / 1000;
    for (
      let i = doc.invites.filter((x: { used: boolean; expires_at: number }) => !x.used && x.expires_at > t).length;
      i < 1024;
      i++
    ) {
      doc.invites.push({
        code_sha256: i.toString(16).padStart(64, "0"),
        name: null,
        workdir: null,
        created_at: t,
        expires_at: t + 600,
        used: false,
      });
    }
    writeFileSync(file, JSON.stringify(doc));
    expect(await ctl.mcp.fails("remote_admin", { action: "invite", args: {} })).toBe("remote_invite_limit");
  });

  test("a worker registry whose copies are both unreadable is an explicit error, never a reset", async () => {
    const file = join(state.path, "remote-workers.json");
    writeFileSync(file, "{broken");
    writeFileSync(`${file}.bak`, "{broken too");
    expect(await ctl.mcp.fails("remote_admin", { action: "list", args: {} })).toBe("state_corrupt");
    const r = await fetch(`${ctl.url}/remote/channel`, {
      headers: { authorization: "Bearer lsmcp_wk_anything-at-all" },
    });
    expect(r.status).toBe(503);
    expect(readFileSync(file, "utf8")).toBe("{broken");
    // A worker refused with a 5xx keeps retrying and keeps its identity (only a 401 means revoked).
    const worker = spawnWorker({ server: ctl.url, workdir: survivorRoot, root: survivorRoot, mode: "run" });
    try {
      await waitFor(() => worker.stderr().includes("refused the channel (HTTP 503); retrying"), {
        what: "the worker to be refused with 503",
      });
      expect(worker.proc.exitCode).toBeNull();
    } finally {
      worker.proc.kill("SIGTERM");
      await worker.proc.exited;
    }
    expect(worker.proc.exitCode).not.toBe(78);
    expect(
      readdirSync(join(survivorRoot, "profiles")).map((p) =>
        existsSync(join(survivorRoot, "profiles", p, "identity.json")),
      ),
    ).toEqual([true]);
  });
});
