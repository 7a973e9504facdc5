/**
 * The join command on "another host": a network namespace behind a veth pair, reaching the
 * controller only through a TLS proxy at its off-loopback base_url. The script must download the
 * controller's own binary, verify it before anything from it runs, install it privately, and hand the
 * invite to the worker on stdin; a tampered bundle or a manifest naming another origin is refused.
 * With a real invite the join ends in `worker connect`, which enrolls and serves the controller
 * over the proxy's WebSocket; a remote session then runs on that host.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  binary,
  type McpHandle,
  needsRoot,
  startHttpServer,
  tempDir,
  type HttpServer,
  type TempDir,
} from "../helpers/harness.ts";
import { createNetns, createTestCa, startTlsProxy, type Netns, type TestCa, type TlsProxy } from "../helpers/netns.ts";
import { behindProxy, connectOperator, freePort, invite } from "../helpers/remote.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const INVITE = "lsmcp_inv_TESTSECRETnotOnAnyCommandLine42";
const sha256 = (bytes: Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);

/** Collects a stream's text as it arrives. */
function collect(stream: ReadableStream<Uint8Array>): () => string {
  let text = "";
  const decoder = new TextDecoder();
  void (async () => {
    for await (const chunk of stream) text += decoder.decode(chunk);
  })();
  return () => text;
}

describe.skipIf(needsRoot("the join test builds a network namespace and a veth pair (ip netns)"))(
  "join script on another host",
  () => {
    let ns: Netns;
    let ca: TestCa;
    let proxy: TlsProxy;
    let controller: HttpServer;
    let mcp: McpHandle;
    const issued: string[] = [];
    let dirs: TempDir[] = [];
    let digest: string;
    let wrappers: string;
    let curlLog: string;

    const dir = () => {
      const d = tempDir("lsm-join-");
      dirs.push(d);
      return d.path;
    };

    beforeAll(async () => {
      ns = createNetns();
      ca = createTestCa(ns.hostAddr);
      proxy = startTlsProxy(ns.hostAddr, ca);
      const port = freePort();
      controller = await startHttpServer(
        { workspace: dir(), state: dir(), env: behindProxy(proxy.url, port) },
        { mode: "mcp", auth: "oauth", port },
      );
      proxy.upstream = controller.url;
      mcp = await connectOperator(controller.url);
      // Built once per controller process; fetched here so the joins below do not wait for it.
      digest = (
        (await (await fetch(`${controller.url}/remote/worker-bundle.tgz?manifest=1`)).json()) as { sha256: string }
      ).sha256;
      // Every curl the script runs leaves its argv here, so the test sees whether the invite was on one.
      wrappers = dir();
      curlLog = join(wrappers, "curl.log");
      writeFileSync(
        join(wrappers, "curl"),
        `#!/bin/bash\nprintf '%s\\n' "$*" >> "$CURL_LOG"\nexec /usr/bin/curl "$@"\n`,
      );
      chmodSync(join(wrappers, "curl"), 0o755);
    }, 300_000);

    afterAll(async () => {
      await mcp?.close().catch(() => undefined);
      await controller?.stop();
      await proxy?.stop();
      await ns?.[Symbol.asyncDispose]();
      ca?.[Symbol.dispose]();
      for (const d of dirs) d[Symbol.dispose]();
      dirs = [];
    });

    /**
     * The join's environment inside the namespace: curl and the worker (Bun's TLS, which the `ws`
     * client uses too, reads NODE_EXTRA_CA_CERTS) trust the test CA.
     */
    function joinEnv(root: string, home: string): Record<string, string> {
      return {
        PATH: `${wrappers}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
        HOME: home,
        CA: ca.caPath,
        CURL_CA_BUNDLE: ca.caPath,
        NODE_EXTRA_CA_CERTS: ca.caPath,
        CURL_LOG: curlLog,
        JOIN_URL: `${proxy.url}/join`,
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
      };
    }

    /** The documented join command with an invite the controller never issued, run to completion. */
    function joinCommand(root: string, workdir: string, extra: string[] = []) {
      return ns.run(
        [
          "bash",
          "-c",
          'curl -fsSL --cacert "$CA" "$JOIN_URL" | bash -s -- "$@"',
          "join",
          "--invite",
          INVITE,
          "--workdir",
          workdir,
          ...extra,
        ],
        { cwd: workdir, env: joinEnv(root, dir()) },
      );
    }

    test("the join installs the verified binary, enrolls and connects: a remote session runs there", async () => {
      const root = join(dir(), "worker");
      const workdir = dir();
      const printed = await invite(mcp, { name: "box one", workdir });
      const code = printed.code;
      issued.push(code);
      expect(printed.command).toBe(
        `curl -fsSL ${proxy.url}/join | bash -s -- --invite ${code} --name 'box one' --workdir ${workdir}`,
      );
      const home = dir();
      // The foreground join, with the command exactly as printed (curl trusts the test CA through
      // CURL_CA_BUNDLE): the script execs `worker connect`, which serves until stopped.
      const proc = Bun.spawn(ns.argv(["bash", "-c", printed.command]), {
        cwd: workdir,
        env: joinEnv(root, home),
        stdin: "ignore",
        stdout: "pipe",
        stderr: "pipe",
      });
      const out = collect(proc.stdout);
      const err = collect(proc.stderr);
      try {
        // Both lines: the script prints them with two writes, and a read may land between them.
        const [, id = "", reconnect] = await waitFor(
          () =>
            /^Worker profile: (p_[0-9a-f]{16})\nReconnect with: (.*)\n/m.exec(out()) ??
            (proc.exitCode !== null ? Promise.reject(new Error(`join exited ${proc.exitCode}: ${err()}`)) : undefined),
          { timeoutMs: 60_000, what: "the join to install" },
        );
        expect(reconnect).toBe(`${root}/run ${id}`);
        // The worker's `ws` client trusts the test CA through NODE_EXTRA_CA_CERTS (TLS checked). Its
        // enrolment line goes to stdout before it connects, but the two pipes are read separately.
        await waitFor(
          () =>
            (err().includes("connected to the controller as box one") && /^\{.*\}$/m.test(out())) ||
            (proc.exitCode !== null ? Promise.reject(new Error(`join exited ${proc.exitCode}: ${err()}`)) : undefined),
          { timeoutMs: 30_000, what: "the worker to connect" },
        );
        const enrolled = JSON.parse(
          out()
            .split("\n")
            .find((l) => l.startsWith("{"))!,
        );
        expect(enrolled).toEqual({
          schema_version: 1,
          server: proxy.url,
          name: "box one",
          workdir,
          profile_id: id,
          enrolled: true,
        });
        const listed = await mcp.ok<{ data: { machines: Array<{ name: string; status: string; workdir: string }> } }>(
          "remote_admin",
          { action: "list", args: {} },
        );
        expect(listed.data.machines.find((m) => m.name === "box one")).toMatchObject({ status: "online", workdir });

        expect(readdirSync(join(root, "runtimes"))).toEqual([digest]);
        const bin = join(root, "runtimes", digest, "local-shell-mcp");
        expect(sha256(readFileSync(bin))).toBe(sha256(readFileSync(binary())));
        const runtime = JSON.parse(readFileSync(join(root, "runtimes", digest, "runtime.json"), "utf8"));
        expect(runtime).toMatchObject({ schema_version: 1, sha256: digest });
        // The join wrote profile.json asking for no name (user@host); the invite bound "box one", and
        // the worker rewrote its public profile with the name the controller assigned.
        const profile = JSON.parse(readFileSync(join(root, "profiles", id, "profile.json"), "utf8"));
        expect(profile).toEqual({
          schema_version: 1,
          profile_id: id,
          runtime_sha256: digest,
          runtime_version: runtime.bundle_version,
          server: proxy.url,
          name: "box one",
          workdir,
        });
        // Its hello reported the profile and launcher: the controller can print how to restart it.
        const rc = await mcp.ok<{ data: { machine: string; profile_id: string; command: string } }>("remote_admin", {
          action: "reconnect_command",
          args: { machine: "box one" },
        });
        expect(rc.data).toEqual({ machine: "box one", profile_id: id, command: `${root}/run ${id}` });
        for (const [path, want] of [
          [root, "700"],
          [join(root, "profiles"), "700"],
          [join(root, "profiles", id), "700"],
          [join(root, "profiles", id, "profile.json"), "600"],
          [join(root, "profiles", id, "identity.json"), "600"],
          [join(root, "runtimes"), "700"],
          [join(root, "runtimes", digest), "700"],
          [join(root, "runtimes", digest, "runtime.json"), "600"],
          [bin, "700"],
          [join(root, "run"), "700"],
          [join(root, "install.lock"), "600"],
        ] as const) {
          expect(`${path} ${mode(path)}`).toBe(`${path} ${want}`);
        }
        // The worker process is the installed runtime; the invite is on its command line nowhere,
        // and in no file (the worker keeps only its token).
        const pids = Bun.spawnSync(["ip", "netns", "pids", ns.name]).stdout.toString().split(/\s+/).filter(Boolean);
        const workerPid = pids.find((p) => {
          try {
            return readlinkSync(`/proc/${p}/exe`) === bin;
          } catch {
            return false;
          }
        });
        expect(workerPid).toBeDefined();
        const argv = readFileSync(`/proc/${workerPid}/cmdline`, "utf8").split("\0");
        expect(argv.slice(1, 4)).toEqual(["worker", "connect", "--server"]);
        expect(argv.join(" ")).not.toContain(code);
        expect(Bun.spawnSync(["grep", "-rl", code, root, workdir, home]).stdout.toString()).toBe("");
        expect(readFileSync(join(root, "profiles", id, "identity.json"), "utf8")).toMatch(/"token": "lsmcp_wk_/);

        // A remote session on that worker: bash runs in the namespace and the result comes back.
        const o = await mcp.ok<{
          session_id: string;
          environment: { workspace: { worker_runtime: Record<string, unknown> } };
        }>("session_start", { target: "remote", machine: "box one", workdir });
        // It runs from its installed copy, so its hello named that runtime's digest (bundle_version).
        expect(o.environment.workspace.worker_runtime).toMatchObject({
          active: true,
          worker_version: runtime.bundle_version,
          bundle_version: runtime.bundle_version,
        });
        const r = await mcp.ok<{ result: { exit_code: number; stdout: string } }>("bash", {
          session_id: o.session_id,
          command: `echo joined-$((6*7)); ip -4 -o addr show | grep -c ${ns.nsAddr}`,
        });
        expect(r.result).toMatchObject({ exit_code: 0, stdout: "joined-42\n1\n" });
        // Connected, the worker still only dials out: nothing listens inside the namespace.
        expect(pidAlive(Number(workerPid))).toBe(true);
        expect((await ns.run(["ss", "-ltnuH"])).stdout.trim()).toBe("");

        // `worker update` from that host goes through the same https origin and finds the runtime current.
        const update = await ns.run([bin, "worker", "update", id], {
          env: {
            PATH: "/usr/bin:/bin",
            HOME: dir(),
            LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
            NODE_EXTRA_CA_CERTS: ca.caPath,
          },
        });
        expect(update.stderr).toBe("");
        expect(JSON.parse(update.stdout)).toEqual({
          schema_version: 1,
          action: "update",
          updated: false,
          version: runtime.bundle_version,
          sha256: digest,
          service_restarted: false,
        });
        // Without trusting the CA the same update is refused (TLS is checked, not bypassed).
        const untrusted = await ns.run([bin, "worker", "update", id], {
          env: { PATH: "/usr/bin:/bin", HOME: dir(), LOCAL_SHELL_MCP_WORKER_STATE_DIR: root },
        });
        expect(untrusted.code).toBe(1);
        expect(untrusted.stderr).toBe("Status: worker command failed: the controller could not be reached\n");
      } finally {
        proc.kill("SIGTERM");
        await proc.exited;
      }
    }, 300_000);

    test("--background starts the worker under nohup logging " +
      "to the profile, reusing the installed runtime", async () => {
      const root = join(dir(), "worker");
      const workdir = dir();
      expect((await joinCommand(root, workdir)).code).toBe(1);
      const r = await joinCommand(root, workdir, ["--background", "--name", "second"]);
      expect(r.code).toBe(0);
      const id = /^Worker profile: (p_[0-9a-f]{16})$/m.exec(r.stdout)![1]!;
      const log = join(root, "profiles", id, "worker.log");
      expect(r.stdout).toContain(`log ${log})`);
      // The invite was never issued: the background worker's refusal lands in its log.
      await waitFor(() => existsSync(log) && readFileSync(log, "utf8").includes("Status: worker command failed: "), {
        timeoutMs: 60_000,
        what: "the background worker's log",
      });
      expect(readFileSync(log, "utf8")).not.toContain(INVITE);
      expect(mode(log)).toBe("600");
      expect(readdirSync(join(root, "profiles"))).toHaveLength(2);
      expect(readdirSync(join(root, "runtimes"))).toEqual([digest]);
    }, 300_000);

    test("the invite is never on a command line of curl", async () => {
      const lines = readFileSync(curlLog, "utf8").trim().split("\n");
      expect(lines.some((l) => l.includes("/remote/worker-bundle.tgz?sha256="))).toBe(true);
      expect(issued).toHaveLength(1);
      expect(lines.filter((l) => [INVITE, ...issued].some((c) => l.includes(c)))).toEqual([]);
    });

    test("an existing identity is refused with the reconnect hint", async () => {
      const root = join(dir(), "worker");
      const profile = "p_00112233aabbccdd";
      mkdirSync(join(root, "profiles", profile), { recursive: true });
      writeFileSync(join(root, "profiles", profile, "identity.json"), "{}");
      const r = await joinCommand(root, dir(), ["--profile", profile]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`reconnect with: ${root}/run ${profile}`);
      expect(existsSync(join(root, "runtimes")) ? readdirSync(join(root, "runtimes")) : []).toEqual([]);
    }, 300_000);

    test("a tampered bundle is refused before anything from it runs", async () => {
      const root = join(dir(), "worker");
      proxy.rewrite = (path, body) => {
        if (!path.startsWith("/remote/worker-bundle.tgz?sha256=")) return undefined;
        const copy = body.slice();
        const at = copy.length >> 1;
        copy[at] = copy[at]! ^ 0xff;
        return copy;
      };
      try {
        const r = await joinCommand(root, dir());
        expect(r.code).toBe(1);
        expect(r.stderr).toContain("SHA-256 does not match the manifest; refusing to run it");
        expect(r.stdout).not.toContain("Worker profile:");
      } finally {
        proxy.rewrite = undefined;
      }
      expect(readdirSync(join(root, "runtimes"))).toEqual([]);
      expect(existsSync(join(root, "run"))).toBe(false);
      expect(readdirSync(root).filter((n) => n.startsWith("install."))).toEqual([]);
    }, 300_000);

    for (const [what, other] of [
      ["another host", "https://198.51.100.7"],
      ["another port", null],
      ["plain http", null],
    ] as const) {
      test(`a manifest whose url points to ${what} is refused without downloading`, async () => {
        const root = join(dir(), "worker");
        const origin = new URL(proxy.url);
        const target =
          other ??
          (what === "plain http" ? `http://${origin.host}` : `https://${origin.hostname}:${Number(origin.port) + 1}`);
        proxy.rewrite = (path, body) => {
          if (path !== "/remote/worker-bundle.tgz?manifest=1") return undefined;
          const m = JSON.parse(new TextDecoder().decode(body));
          return new TextEncoder().encode(JSON.stringify({ ...m, url: `${target}${m.url}` }));
        };
        const before = proxy.requests.length;
        try {
          const r = await joinCommand(root, dir());
          expect(r.code).toBe(1);
          expect(r.stderr).toContain("the bundle url points to another origin");
        } finally {
          proxy.rewrite = undefined;
        }
        expect(proxy.requests.slice(before).filter((p) => p.includes("sha256="))).toEqual([]);
        expect(readdirSync(join(root, "runtimes"))).toEqual([]);
      }, 300_000);
    }

    test("a manifest for another platform or above 256 MiB is refused", async () => {
      for (const [patch, message] of [
        [{ platform: "darwin-arm64" }, "the controller's bundle is for darwin-arm64"],
        [{ size: 256 * 1024 * 1024 + 1 }, "larger than 256 MiB"],
      ] as const) {
        proxy.rewrite = (path, body) =>
          path === "/remote/worker-bundle.tgz?manifest=1"
            ? new TextEncoder().encode(JSON.stringify({ ...JSON.parse(new TextDecoder().decode(body)), ...patch }))
            : undefined;
        try {
          const r = await joinCommand(join(dir(), "worker"), dir());
          expect(r.code).toBe(1);
          expect(r.stderr).toContain(message);
        } finally {
          proxy.rewrite = undefined;
        }
      }
    }, 300_000);
  },
);
