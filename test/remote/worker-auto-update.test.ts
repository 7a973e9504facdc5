/**
 * Automatic update (spec 1.12) with real controllers of two versions (`scripts/build.ts
 * --version-override`): a worker running an installed runtime is offered the controller's current
 * one after the welcome, drains, installs it with `worker update`'s checks, switches profile.json and
 * hands over to the new runtime's `worker run` (same boot id: calls that waited reach it). A new
 * runtime that does not come up is stopped and profile.json rolled back.
 *
 * The controllers sit behind the TLS proxy (base_url https off loopback), which also lets the test
 * hold back the controller's runtime offer until a call runs, and serve a broken bundle.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";
import { tarHeader } from "../../src/remote/bundle.ts";
import { binary, type McpHandle, needsRoot, ROOT, serverEnv, tempDir, type TempDir } from "../helpers/harness.ts";
import { createNetns, createTestCa, startTlsProxy, type Netns, type TestCa, type TlsProxy } from "../helpers/netns.ts";
import { behindProxy, connectOperator, freePort, invite } from "../helpers/remote.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const NEW_VERSION = "9.9.9";

function collect(stream: ReadableStream<Uint8Array>): () => string {
  let text = "";
  const decoder = new TextDecoder();
  void (async () => {
    for await (const chunk of stream) text += decoder.decode(chunk);
  })();
  return () => text;
}

interface Controller {
  url: string;
  mcp: McpHandle;
  stop(): Promise<void>;
}

/** `serve --mode mcp` of `exe` on loopback with base_url = the proxy (OAuth on: see behindProxy). */
async function serve(exe: string, state: string, workspace: string, baseUrl: string): Promise<Controller> {
  const port = freePort();
  const proc = Bun.spawn(
    [
      exe,
      "serve",
      "--mode",
      "mcp",
      "--auth-mode",
      "oauth",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--workspace-root",
      workspace,
      "--state-dir",
      state,
    ],
    {
      env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...behindProxy(baseUrl, port) }),
      stdin: "ignore",
      stdout: "ignore",
      stderr: "pipe",
    },
  );
  const stderr = collect(proc.stderr);
  const url = await waitFor(
    () =>
      /listening on (http:\/\/[^\s]+)\/mcp/.exec(stderr())?.[1] ??
      (proc.exitCode !== null ? Promise.reject(new Error(`controller exited: ${stderr()}`)) : undefined),
    { timeoutMs: 30_000, what: "the controller to listen" },
  );
  const mcp = await connectOperator(url);
  return {
    url,
    mcp,
    stop: async () => {
      await mcp.close().catch(() => undefined);
      proc.kill("SIGTERM");
      await proc.exited;
    },
  };
}

/** A one-member bundle whose `local-shell-mcp` answers --version but exits 3 for anything else. */
function brokenBundle(): { bytes: Uint8Array; sha256: string } {
  const script = Buffer.from(
    `#!/bin/sh\nif [ "$1" = --version ]; then echo "local-shell-mcp ${NEW_VERSION} broken"; exit 0; ` +
      `fi\necho "this runtime cannot serve" >&2\nexit 3\n`,
  );
  const tar = Buffer.concat([
    tarHeader("local-shell-mcp", script.length, 0o755),
    script,
    Buffer.alloc(((512 - (script.length % 512)) % 512) + 1024),
  ]);
  const bytes = Bun.gzipSync(tar);
  return { bytes, sha256: new Bun.CryptoHasher("sha256").update(bytes).digest("hex") };
}

const frameType = (text: string) => {
  try {
    return (JSON.parse(text) as { type?: string }).type;
  } catch {
    return undefined;
  }
};

describe.skipIf(needsRoot("the update test fronts the controllers with a TLS proxy on a veth address (ip netns)"))(
  "automatic worker update",
  () => {
    let ns: Netns;
    let ca: TestCa;
    let proxy: TlsProxy;
    let dirs: TempDir[] = [];
    const dir = () => {
      const d = tempDir("lsm-aupd-");
      dirs.push(d);
      return d.path;
    };
    let state: string;
    let workspace: string;
    let newer: string;
    let current: { sha256: string; version: string; archive: string };
    let ctl: Controller | undefined;
    const stray: number[] = [];

    beforeAll(async () => {
      ns = createNetns();
      ca = createTestCa(ns.hostAddr);
      proxy = startTlsProxy(ns.hostAddr, ca);
      state = dir();
      workspace = dir();
      newer = join(dir(), `lsm-${NEW_VERSION}`);
      const b = Bun.spawn(
        [process.execPath, join(ROOT, "scripts", "build.ts"), "--outfile", newer, "--version-override", NEW_VERSION],
        { cwd: ROOT, stdout: "ignore", stderr: "pipe" },
      );
      const err = await new Response(b.stderr).text();
      if ((await b.exited) !== 0) throw new Error(`build ${NEW_VERSION} failed: ${err}`);
      // The current build's bundle, as the join script would have installed it.
      const c1 = await serve(binary(), state, workspace, proxy.url);
      try {
        const m = (await (await fetch(`${c1.url}/remote/worker-bundle.tgz?manifest=1`)).json()) as {
          sha256: string;
          bundle_version: string;
        };
        const archive = join(dir(), "current.tgz");
        await Bun.write(
          archive,
          await (await fetch(`${c1.url}/remote/worker-bundle.tgz?sha256=${m.sha256}`)).arrayBuffer(),
        );
        current = { sha256: m.sha256, version: m.bundle_version, archive };
      } finally {
        await c1.stop();
      }
      ctl = await serve(newer, state, workspace, proxy.url);
      proxy.upstream = ctl.url;
    }, 300_000);

    afterAll(async () => {
      for (const pid of stray) if (pidAlive(pid)) process.kill(pid, "SIGKILL");
      await ctl?.stop();
      await proxy?.stop();
      await ns?.[Symbol.asyncDispose]();
      ca?.[Symbol.dispose]();
      for (const d of dirs) d[Symbol.dispose]();
      dirs = [];
    });

    const workerEnv = (root: string) => ({
      PATH: process.env.PATH!,
      HOME: dir(),
      LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
      LOCAL_SHELL_MCP_LOG_LEVEL: "3",
      NODE_EXTRA_CA_CERTS: ca.caPath,
    });

    /** A worker that runs the current build's installed runtime, enrolled with the (newer) controller. */
    async function joinedWorker(name: string) {
      const root = join(dir(), "w");
      const workdir = dir();
      const id = `p_${name.replace(/[^a-z0-9]/g, "")}00112233`;
      const installed = Bun.spawnSync(
        [
          binary(),
          "worker",
          "install-runtime",
          "--bundle",
          current.archive,
          "--sha256",
          current.sha256,
          "--bundle-version",
          current.version,
          "--profile",
          id,
          "--server",
          proxy.url,
          "--workdir",
          workdir,
          "--name",
          name,
        ],
        { env: workerEnv(root), stdout: "pipe", stderr: "pipe" },
      );
      expect(installed.stderr.toString()).toBe("");
      const oldBin = join(root, "runtimes", current.sha256, "local-shell-mcp");
      const code = (await invite(ctl!.mcp, { name })).code;
      const proc = Bun.spawn(
        [oldBin, "worker", "connect", "--server", proxy.url, "--invite-stdin", "--workdir", workdir, "--profile", id],
        { env: workerEnv(root), cwd: workdir, stdin: "pipe", stdout: "pipe", stderr: "pipe" },
      );
      stray.push(proc.pid);
      proc.stdin.write(`${code}\n`);
      proc.stdin.end();
      const stderr = collect(proc.stderr);
      collect(proc.stdout);
      await waitFor(
        () =>
          stderr().includes(`connected to the controller as ${name}`) ||
          (proc.exitCode !== null ? Promise.reject(new Error(`worker exited: ${stderr()}`)) : undefined),
        { timeoutMs: 30_000, what: "the worker to connect" },
      );
      const profile = () =>
        JSON.parse(readFileSync(join(root, "profiles", id, "profile.json"), "utf8")) as {
          runtime_sha256: string;
          runtime_version: string;
          name: string;
        };
      return { root, workdir, id, proc, stderr, profile };
    }

    /** The process running `bin`, once the handover happened (the test stops it at the end). */
    function processOf(bin: string): number | undefined {
      for (const p of readdirSync("/proc")) {
        if (!/^\d+$/.test(p)) continue;
        try {
          if (readlinkSync(`/proc/${p}/exe`) === bin) return Number(p);
        } catch {
          // gone, or not ours to read
        }
      }
      return undefined;
    }

    async function remoteBash(machine: string, workdir: string, command: string) {
      const o = await ctl!.mcp.ok<{
        session_id: string;
        environment: { workspace: { worker_runtime: Record<string, unknown> } };
      }>("session_start", { target: "remote", machine, workdir });
      const r = await ctl!.mcp.ok<{ result: { exit_code: number; stdout: string } }>("bash", {
        session_id: o.session_id,
        command,
      });
      return { runtime: o.environment.workspace.worker_runtime, result: r.result };
    }

    test("a newer controller updates an idle worker: installed, profile switched, the new runtime serves", async () => {
      const w = await joinedWorker("idle");
      // The predecessor hands over and exits 0; the successor runs the newer runtime.
      expect(await w.proc.exited).toBe(0);
      expect(w.stderr()).toContain(`updating the worker runtime from ${current.version} to ${NEW_VERSION}`);
      const p = w.profile();
      expect(p.runtime_version).toBe(NEW_VERSION);
      expect(p.runtime_sha256).not.toBe(current.sha256);
      const newBin = join(w.root, "runtimes", p.runtime_sha256, "local-shell-mcp");
      expect(statSync(join(w.root, "runtimes", p.runtime_sha256, "runtime.json")).isFile()).toBe(true);
      const successor = await waitFor(() => processOf(newBin), {
        timeoutMs: 30_000,
        what: "the new runtime's process",
      });
      stray.push(successor);
      // No credential on the successor's command line: only `worker run <profile>`.
      expect(readFileSync(`/proc/${successor}/cmdline`, "utf8").split("\0").filter(Boolean)).toEqual([
        newBin,
        "worker",
        "run",
        w.id,
      ]);
      const { runtime, result } = await waitFor(
        async () => remoteBash("idle", w.workdir, "echo updated").catch(() => undefined),
        { timeoutMs: 30_000, what: "a call on the updated worker" },
      );
      expect(result).toMatchObject({ exit_code: 0, stdout: "updated\n" });
      expect(runtime).toMatchObject({ worker_version: NEW_VERSION, bundle_version: NEW_VERSION });
    }, 120_000);

    test("a busy worker updates after its call finishes; a call arriving meanwhile waits and runs on the new " +
      "runtime", async () => {
      // The offer is held back until a call runs, so the worker is busy when it arrives.
      proxy.down = (text) => (frameType(text) === "runtime" ? null : undefined);
      try {
        const w = await joinedWorker("busy");
        const o = await ctl!.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "busy",
          workdir: w.workdir,
        });
        const slow = ctl!.mcp.ok<{ result: { exit_code: number; stdout: string } }>("bash", {
          session_id: o.session_id,
          command: "touch started; sleep 3; date +%s%N > finished; echo slept",
        });
        await waitFor(() => statSync(join(w.workdir, "started"), { throwIfNoEntry: false }) !== undefined, {
          timeoutMs: 30_000,
          what: "the slow call to start",
        });
        proxy.releaseHeld();
        // Draining now: a new call waits instead of running beside the slow one.
        await waitFor(() => (w.stderr().includes(`offers runtime ${NEW_VERSION}; new calls wait`) ? true : undefined), {
          timeoutMs: 30_000,
          what: "the worker to start draining",
        });
        const later = ctl!.mcp.ok<{ result: { exit_code: number; stdout: string } }>("bash", {
          session_id: o.session_id,
          command: "date +%s%N > later; echo later",
        });
        expect((await slow).result).toMatchObject({ exit_code: 0, stdout: "slept\n" });
        expect(await w.proc.exited).toBe(0);
        expect((await later).result).toMatchObject({ exit_code: 0, stdout: "later\n" });
        const p = w.profile();
        expect(p.runtime_version).toBe(NEW_VERSION);
        // The new runtime was installed only after the running call had finished (drained first).
        const installedAt = Date.parse(
          JSON.parse(readFileSync(join(w.root, "runtimes", p.runtime_sha256, "runtime.json"), "utf8")).installed_at,
        );
        const finishedAt = Number(BigInt(readFileSync(join(w.workdir, "finished"), "utf8").trim()) / 1_000_000n);
        expect(installedAt).toBeGreaterThanOrEqual(finishedAt);
        // The call that arrived while draining waited: it ran only after the new runtime was installed.
        expect(
          Number(BigInt(readFileSync(join(w.workdir, "later"), "utf8").trim()) / 1_000_000n),
        ).toBeGreaterThanOrEqual(installedAt);
        const successor = await waitFor(
          () => processOf(join(w.root, "runtimes", p.runtime_sha256, "local-shell-mcp")),
          { timeoutMs: 30_000, what: "the new runtime's process" },
        );
        stray.push(successor);
      } finally {
        proxy.down = undefined;
        proxy.releaseHeld();
      }
    }, 120_000);

    test("a new runtime that does not come up is rolled back: " +
      "profile restored, the old worker carries on", async () => {
      const broken = brokenBundle();
      // The controller's offer, manifest and bundle all name the broken bundle (it passes --version).
      proxy.down = (text) =>
        frameType(text) === "runtime" ? JSON.stringify({ ...JSON.parse(text), sha256: broken.sha256 }) : undefined;
      proxy.rewrite = (path, body) => {
        if (path === "/remote/worker-bundle.tgz?manifest=1") {
          const m = JSON.parse(new TextDecoder().decode(body));
          return new TextEncoder().encode(
            JSON.stringify({
              ...m,
              sha256: broken.sha256,
              size: broken.bytes.length,
              url: `/remote/worker-bundle.tgz?sha256=${broken.sha256}`,
            }),
          );
        }
        return path === `/remote/worker-bundle.tgz?sha256=${broken.sha256}` ? broken.bytes : undefined;
      };
      try {
        const w = await joinedWorker("broken");
        await waitFor(() => (w.stderr().includes("did not come up; rolled back") ? true : undefined), {
          timeoutMs: 60_000,
          what: "the rollback",
        });
        expect(w.stderr()).toContain("this runtime cannot serve");
        expect(w.profile()).toMatchObject({ runtime_sha256: current.sha256, runtime_version: current.version });
        expect(w.proc.exitCode).toBeNull();
        // The old runtime reconnected and serves calls (offered the same digest again, it does not retry).
        const { result, runtime } = await waitFor(
          async () => remoteBash("broken", w.workdir, "echo still-here").catch(() => undefined),
          { timeoutMs: 30_000, what: "a call after the rollback" },
        );
        expect(result).toMatchObject({ exit_code: 0, stdout: "still-here\n" });
        expect(runtime).toMatchObject({ worker_version: current.version });
        expect(w.stderr().match(/updating the worker runtime/g)).toHaveLength(1);
        w.proc.kill("SIGTERM");
        await w.proc.exited;
      } finally {
        proxy.down = undefined;
        proxy.rewrite = undefined;
      }
    }, 120_000);
  },
);
