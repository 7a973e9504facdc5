/**
 * The channel's edges, with raw HTTP and WebSocket clients against the compiled controller: the
 * worker bearer is checked before any upgrade, an oversized frame closes the link with 1009 while
 * other workers carry on, and a result above max_http_request_bytes is never sent.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, invite, spawnWorker, startController, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const LIMIT = 300_000;
const UPGRADE = {
  upgrade: "websocket",
  connection: "Upgrade",
  "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
  "sec-websocket-version": "13",
};

describe("worker channel edges", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let worker: Worker;
  let token: string;
  const dirs: TempDir[] = [];

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    ctl = await startController({
      state: state.path,
      workspace: ws.path,
      args: [
        "--max-http-request-bytes",
        String(LIMIT),
        "--remote-max-concurrent-jobs",
        "2",
        "--remote-max-pending-jobs",
        "1",
      ],
    });
    worker = await enrolWorker(ctl, "steady");
    // A second identity, used only by the raw clients below.
    const root = tempDir("lsm-worker-");
    const wd = tempDir("lsm-worker-wd-");
    dirs.push(root, wd);
    const p = spawnWorker({
      server: ctl.url,
      invite: (await invite(ctl.mcp, { name: "raw" })).code,
      workdir: wd.path,
      root: root.path,
      mode: "enroll",
    });
    await p.proc.exited;
    const profile = JSON.parse(p.stdout()).profile_id;
    token = JSON.parse(readFileSync(join(root.path, "profiles", profile, "identity.json"), "utf8")).token;
  });
  afterAll(async () => {
    await worker.stop();
    await ctl.stop();
    for (const d of [worker.root, ...dirs, ws, state]) d[Symbol.dispose]();
  });

  test(
    "no, malformed or unknown bearers are refused with " + "401 before the upgrade; a known one must upgrade",
    async () => {
      for (const auth of [undefined, "Basic abc", "Bearer lsmcp_wk_unknown-token-value", `Bearer ${token}x`]) {
        const r = await fetch(`${ctl.url}/remote/channel`, {
          headers: { ...UPGRADE, ...(auth ? { authorization: auth } : {}) },
        });
        expect(r.status).toBe(401);
        expect(((await r.json()) as { error: string }).error).toBe("worker_unauthorized");
      }
      // The right token without an upgrade request is not a 401: the bearer was accepted first.
      const plain = await fetch(`${ctl.url}/remote/channel`, { headers: { authorization: `Bearer ${token}` } });
      expect(plain.status).toBe(426);
      // A raw WebSocket with an unknown token never opens.
      const refused = new WebSocket(`${ctl.url.replace("http", "ws")}/remote/channel`, {
        headers: { authorization: "Bearer lsmcp_wk_nope" },
      } as never);
      const outcome = await new Promise<string>((resolve) => {
        refused.onopen = () => resolve("open");
        refused.onerror = () => resolve("error");
        refused.onclose = () => resolve("closed");
      });
      expect(outcome).not.toBe("open");
    },
  );

  test("a frame above max_http_request_bytes closes that link with 1009; other workers are unaffected", async () => {
    const sock = new WebSocket(`${ctl.url.replace("http", "ws")}/remote/channel`, {
      headers: { authorization: `Bearer ${token}` },
    } as never);
    const messages: string[] = [];
    sock.onmessage = (e) => messages.push(String(e.data));
    await new Promise<void>((resolve, reject) => {
      sock.onopen = () => resolve();
      sock.onerror = () => reject(new Error("raw channel did not open"));
    });
    sock.send(
      JSON.stringify({
        type: "hello",
        protocol: 1,
        boot_id: "raw-boot",
        runtime: { version: "0", build_digest: "raw", bundle_sha256: null },
        running: [],
        unacked: [],
      }),
    );
    await waitFor(() => messages.some((m) => m.includes('"welcome"')), { what: "the welcome" });
    expect(JSON.parse(messages[0]!)).toMatchObject({ type: "welcome", name: "raw", max_frame_bytes: LIMIT });
    const closed = new Promise<number>((resolve) => (sock.onclose = (e) => resolve(e.code)));
    sock.send(JSON.stringify({ type: "result", id: "x", ok: true, data: "y".repeat(LIMIT + 10) }));
    expect(await closed).toBe(1009);
    const sid = (
      await ctl.mcp.ok<{ session_id: string }>("session_start", {
        target: "remote",
        machine: "steady",
        workdir: worker.workdir,
      })
    ).session_id;
    expect(
      (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo still-fine" })).result
        .stdout,
    ).toBe("still-fine\n");
  });

  test("a malformed frame closes the link with a protocol error", async () => {
    const sock = new WebSocket(`${ctl.url.replace("http", "ws")}/remote/channel`, {
      headers: { authorization: `Bearer ${token}` },
    } as never);
    await new Promise<void>((resolve) => (sock.onopen = () => resolve()));
    const closed = new Promise<number>((resolve) => (sock.onclose = (e) => resolve(e.code)));
    sock.send("{not json");
    expect(await closed).toBe(1002);
  });

  test(
    "a result larger than max_http_request_bytes is refused by the worker as remote_result_too_large; the " +
      "next call works",
    async () => {
      writeFileSync(join(worker.workdir, "big.txt"), `${"z".repeat(99)}\n`.repeat(6000));
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "steady",
          workdir: worker.workdir,
        })
      ).session_id;
      expect(await ctl.mcp.fails("read", { session_id: sid, path: "big.txt:raw" })).toBe("remote_result_too_large");
      expect(
        (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo after" })).result
          .stdout,
      ).toBe("after\n");
    },
  );

  test(
    "per worker, remote_max_concurrent_jobs calls run and " + "remote_max_pending_jobs wait; more are refused",
    async () => {
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "steady",
          workdir: worker.workdir,
        })
      ).session_id;
      const go = join(worker.workdir, "go");
      const held = [0, 1, 2].map((i) =>
        ctl.mcp.ok<{ result: { stdout: string } }>("bash", {
          session_id: sid,
          command: `until [ -e ${go} ]; do sleep 0.05; done; echo held-${i}`,
          timeout_s: 60,
        }),
      );
      await waitFor(
        async () => {
          const list = await ctl.mcp.ok<{ data: { machines: Array<{ name: string; queue_depth: number }> } }>(
            "remote_admin",
            { action: "list", args: {} },
          );
          return list.data.machines.find((m) => m.name === "steady")!.queue_depth === 3;
        },
        { what: "two running and one waiting call" },
      );
      expect(await ctl.mcp.fails("bash", { session_id: sid, command: "true" })).toBe("remote_queue_full");
      writeFileSync(go, "");
      expect((await Promise.all(held)).map((r) => r.result.stdout).sort()).toEqual([
        "held-0\n",
        "held-1\n",
        "held-2\n",
      ]);
    },
  );

  test("a worker whose runtime fails the gate is refused with 409 and its invite stays usable", async () => {
    const code = (await invite(ctl.mcp, {})).code;
    const body = (runtime: unknown) =>
      JSON.stringify({ invite: code, name: "gated", workdir: "/tmp", capabilities: [], info: {}, runtime });
    const refused = await fetch(`${ctl.url}/remote/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: body({
        protocol_version: true,
        runtime_kind: "binary",
        worker_version: "1",
        build_digest: "x",
        bundle_sha256: null,
      }),
    });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { error: string }).error).toBe("runtime_incompatible");
    const ok = await fetch(`${ctl.url}/remote/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: body({
        protocol_version: 1,
        runtime_kind: "binary",
        worker_version: "1",
        build_digest: "x",
        bundle_sha256: null,
      }),
    });
    expect(ok.status).toBe(200);
    const data = ((await ok.json()) as { data: { token: string; name: string } }).data;
    expect(data.name).toBe("gated");
    expect(data.token).toMatch(/^lsmcp_wk_[A-Za-z0-9_-]{43}$/);
  });
});
