/**
 * Runtime installation in TypeScript, through the binary's `worker` commands against a real
 * controller: `install-runtime` (what the join script calls), `update` (fetch, verify, switch,
 * no downgrade without --force), rollback of a runtime that does not start, refusal of archives that
 * hold anything but the one executable, and `migrate` of a Python 4.3.0 worker state.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { binary, connectHttp, startHttp, tempDir, type HttpServer, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const sha256 = (bytes: Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);

interface Manifest {
  sha256: string;
  bundle_version: string;
  size: number;
}

describe("worker runtime installation", () => {
  let controller: HttpServer;
  let manifest: Manifest;
  let bundle: string;
  let dirs: TempDir[] = [];
  const dir = () => {
    const d = tempDir("lsm-wrt-");
    dirs.push(d);
    return d.path;
  };

  /** Runs `local-shell-mcp worker …` with the given worker state root. */
  /** Asynchronous: a listener inside this test process must keep answering while the command runs. */
  async function worker(root: string, args: string[], env: Record<string, string> = {}) {
    const proc = Bun.spawn([binary(), "worker", ...args], {
      env: {
        PATH: process.env.PATH!,
        HOME: dir(),
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
        LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER: "unsupported",
        ...env,
      },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    return { code, stdout, stderr, json: () => JSON.parse(stdout) };
  }

  async function installRuntime(root: string, archive: string, digest: string, extra: string[] = []) {
    return await worker(root, [
      "install-runtime",
      "--bundle",
      archive,
      "--sha256",
      digest,
      "--bundle-version",
      manifest.bundle_version,
      ...extra,
    ]);
  }

  beforeAll(async () => {
    controller = await startHttp({ workspace: dir(), state: dir() });
    manifest = (await (await fetch(`${controller.url}/remote/worker-bundle.tgz?manifest=1`)).json()) as Manifest;
    bundle = join(dir(), "bundle.tgz");
    await Bun.write(
      bundle,
      await (await fetch(`${controller.url}/remote/worker-bundle.tgz?sha256=${manifest.sha256}`)).arrayBuffer(),
    );
  }, 120_000);

  afterAll(async () => {
    await controller?.stop();
    for (const d of dirs) d[Symbol.dispose]();
    dirs = [];
  });

  /** A root with one profile bound to the controller's runtime, as the join script leaves it. */
  async function joinedRoot(): Promise<{ root: string; id: string }> {
    const root = join(dir(), "w");
    const id = "p_0123456789abcdef";
    const r = await installRuntime(root, bundle, manifest.sha256, [
      "--profile",
      id,
      "--server",
      controller.url,
      "--workdir",
      dir(),
    ]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    return { root, id };
  }

  test("install-runtime verifies, unpacks privately, writes runtime.json and the launcher; a second run reuses " +
    "it", async () => {
    const root = join(dir(), "w");
    const first = await installRuntime(root, bundle, manifest.sha256);
    expect(first.code).toBe(0);
    expect(first.json()).toMatchObject({
      schema_version: 1,
      action: "install-runtime",
      updated: true,
      sha256: manifest.sha256,
      launcher: join(root, "run"),
    });
    const bin = join(root, "runtimes", manifest.sha256, "local-shell-mcp");
    expect(sha256(readFileSync(bin))).toBe(sha256(readFileSync(binary())));
    expect([mode(bin), mode(join(root, "runtimes", manifest.sha256, "runtime.json")), mode(join(root, "run"))]).toEqual(
      ["700", "600", "700"],
    );
    expect(JSON.parse(readFileSync(join(root, "runtimes", manifest.sha256, "runtime.json"), "utf8"))).toMatchObject({
      schema_version: 1,
      bundle_version: manifest.bundle_version,
      sha256: manifest.sha256,
      size: manifest.size,
    });
    expect((await installRuntime(root, bundle, manifest.sha256)).json().updated).toBe(false);
    expect(readdirSync(join(root, "runtimes"))).toEqual([manifest.sha256]);
  }, 60_000);

  test("the launcher checks its argument and the profile's runtime, then execs that runtime's worker run", async () => {
    const { root, id } = await joinedRoot();
    const launch = async (...args: string[]) => {
      const proc = Bun.spawn([join(root, "run"), ...args], {
        env: { PATH: process.env.PATH! },
        stdin: "ignore",
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
      return { code, stderr };
    };
    expect(await launch()).toEqual({ code: 2, stderr: `usage: ${root}/run <profile_id>\n` });
    expect((await launch("../../etc")).code).toBe(2);
    expect(await launch("p_ffffffffffffffff")).toEqual({
      code: 1,
      stderr: `local-shell-mcp worker: no profile p_ffffffffffffffff under ${root}\n`,
    });
    // The valid profile reaches the installed runtime: none of the launcher's own refusals. (Without
    // an identity the runtime's `worker run` then fails on its own terms.)
    const ok = await launch(id);
    expect(ok.stderr).not.toContain("local-shell-mcp worker: ");
    expect(ok.stderr).not.toContain("usage:");
    const path = join(root, "profiles", id, "profile.json");
    writeFileSync(
      path,
      JSON.stringify({ ...JSON.parse(readFileSync(path, "utf8")), runtime_sha256: "e".repeat(64) }, null, 2),
    );
    expect(await launch(id)).toEqual({
      code: 1,
      stderr: `local-shell-mcp worker: the runtime of profile ${id} is not installed; run the join command again\n`,
    });
  }, 60_000);

  test("under launchd the launcher turns a real revocation into " +
    "a clean stop (no restart); systemd gets exit 78", async () => {
    const mcp = await connectHttp(controller.url);
    try {
      for (const [kind, want] of [
        ["launchd", 0],
        ["systemd", 78],
      ] as const) {
        const { root, id } = await joinedRoot();
        const name = `svc-${kind}`;
        const code = (
          (await mcp.ok("remote_admin", { action: "invite", args: { name } })) as { data: { code: string } }
        ).data.code;
        const enrolled = Bun.spawn(
          [
            join(root, "runtimes", manifest.sha256, "local-shell-mcp"),
            "worker",
            "enroll",
            "--server",
            controller.url,
            "--invite-stdin",
            "--profile",
            id,
            "--workdir",
            dir(),
          ],
          {
            env: { PATH: process.env.PATH!, HOME: dir(), LOCAL_SHELL_MCP_WORKER_STATE_DIR: root },
            stdin: new TextEncoder().encode(`${code}\n`),
            stdout: "pipe",
            stderr: "pipe",
          },
        );
        expect(await enrolled.exited).toBe(0);
        // What the service starts: the launcher with the profile id, the manager's kind in the environment.
        const service = Bun.spawn([join(root, "run"), id], {
          env: { PATH: process.env.PATH!, HOME: dir(), LOCAL_SHELL_MCP_WORKER_SERVICE_KIND: kind },
          stdin: "ignore",
          stdout: "ignore",
          stderr: "pipe",
        });
        let stderr = "";
        void (async () => {
          for await (const chunk of service.stderr) stderr += new TextDecoder().decode(chunk);
        })();
        await waitFor(() => stderr.includes(`connected to the controller as ${name}`), {
          what: `the ${kind} worker to connect`,
        });
        await mcp.ok("remote_admin", { action: "revoke", args: { machine: name } });
        expect(await service.exited).toBe(want);
        if (kind === "launchd")
          expect(stderr).toContain(
            `local-shell-mcp worker: profile ${id} was revoked; launchd will not start it again`,
          );
      }
    } finally {
      await mcp.close();
    }
  }, 60_000);

  test("runtime-info names a digest only for the binary running from its installed copy", async () => {
    const { root } = await joinedRoot();
    const info = async (exe: string) => {
      const proc = Bun.spawn([exe, "worker", "runtime-info"], {
        env: { PATH: process.env.PATH!, LOCAL_SHELL_MCP_WORKER_STATE_DIR: root },
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stdout, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
      expect(code).toBe(0);
      return JSON.parse(stdout);
    };
    expect(await info(join(root, "runtimes", manifest.sha256, "local-shell-mcp"))).toEqual({
      schema_version: 1,
      managed: true,
      sha256: manifest.sha256,
      bundle_version: manifest.bundle_version,
    });
    // The very same bytes elsewhere are not the installed runtime.
    expect(await info(binary())).toEqual({ schema_version: 1, managed: false, sha256: null, bundle_version: null });
    // Nor is an install whose runtime.json is gone.
    const record = join(root, "runtimes", manifest.sha256, "runtime.json");
    writeFileSync(record, "{}");
    expect((await info(join(root, "runtimes", manifest.sha256, "local-shell-mcp"))).managed).toBe(false);
  }, 60_000);

  test("a digest that does not match the archive is refused and nothing is installed", async () => {
    const root = join(dir(), "w");
    const r = await installRuntime(root, bundle, "a".repeat(64));
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      "Status: worker command failed: the worker bundle's SHA-256 does not match; refusing to install it\n",
    );
    expect(existsSync(join(root, "runtimes", "a".repeat(64)))).toBe(false);
  }, 60_000);

  test("archives with another member name or a symlink member are refused", async () => {
    for (const member of ["other-name", "local-shell-mcp"]) {
      const work = dir();
      const archive = join(work, "b.tgz");
      const staged = join(work, "s");
      mkdirSync(staged);
      if (member === "other-name")
        writeFileSync(join(staged, member), "#!/bin/sh\necho local-shell-mcp 9.9.9\n", { mode: 0o755 });
      else symlinkSync("/bin/sh", join(staged, member));
      expect(Bun.spawnSync(["tar", "-czf", archive, "-C", staged, member]).exitCode).toBe(0);
      const digest = sha256(readFileSync(archive));
      const root = join(dir(), "w");
      const r = await installRuntime(root, archive, digest);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/exactly one file named local-shell-mcp|not a regular file/);
      expect(existsSync(join(root, "runtimes", digest))).toBe(false);
    }
  }, 60_000);

  test("a runtime that does not start is rolled back and the previous copy stays in place", async () => {
    const { root } = await joinedRoot();
    const work = dir();
    const staged = join(work, "s");
    mkdirSync(staged);
    writeFileSync(join(staged, "local-shell-mcp"), "#!/bin/sh\nexit 3\n");
    chmodSync(join(staged, "local-shell-mcp"), 0o755);
    const archive = join(work, "broken.tgz");
    Bun.spawnSync(["tar", "-czf", archive, "-C", staged, "local-shell-mcp"]);
    const digest = sha256(readFileSync(archive));
    // Pretend that digest was installed before (a working binary): a forced reinstall must keep it.
    const previous = join(root, "runtimes", digest);
    mkdirSync(previous, { mode: 0o700 });
    copyFileSync(binary(), join(previous, "local-shell-mcp"));
    chmodSync(join(previous, "local-shell-mcp"), 0o700);
    writeFileSync(
      join(previous, "runtime.json"),
      JSON.stringify({ schema_version: 1, bundle_version: "0.0.1", sha256: digest, size: 1, installed_at: "x" }),
    );
    const r = await installRuntime(root, archive, digest, ["--force"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("the new worker runtime did not start");
    expect(sha256(readFileSync(join(previous, "local-shell-mcp")))).toBe(sha256(readFileSync(binary())));
    expect(readdirSync(join(root, "runtimes")).filter((n) => n.includes(".install."))).toEqual([]);
  }, 60_000);

  test("update installs the controller's runtime and rebinds the profile when it differs", async () => {
    const { root, id } = await joinedRoot();
    const unchanged = await worker(root, ["update"]);
    expect(unchanged.code).toBe(0);
    expect(unchanged.json()).toEqual({
      schema_version: 1,
      action: "update",
      updated: false,
      version: manifest.bundle_version,
      sha256: manifest.sha256,
      service_restarted: false,
    });
    // A profile still bound to an older runtime moves to the controller's.
    const path = join(root, "profiles", id, "profile.json");
    const profile = JSON.parse(readFileSync(path, "utf8"));
    writeFileSync(path, JSON.stringify({ ...profile, runtime_sha256: "b".repeat(64) }));
    const moved = await worker(root, ["update", id]);
    expect(moved.json()).toMatchObject({ updated: true, sha256: manifest.sha256 });
    expect(JSON.parse(readFileSync(path, "utf8")).runtime_sha256).toBe(manifest.sha256);
    expect(mode(path)).toBe("600");
  }, 60_000);

  test("update restarts a running service bound to the profile only when the runtime changed", async () => {
    const { root, id } = await joinedRoot();
    const stubs = dir();
    const home = dir();
    writeFileSync(
      join(stubs, "systemctl"),
      `#!/bin/bash\nprintf '%s\\n' "$*" >> "${stubs}/log"\nif [ "$1 $2" = "--user show" ]; then printf ` +
        `'ActiveState=active\\nSubState=running\\nMainPID=99\\nUnitFileState=enabled\\n'; fi\nexit 0\n`,
      { mode: 0o755 },
    );
    const env = { PATH: `${stubs}:${process.env.PATH}`, HOME: home, LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER: "systemd" };
    expect((await worker(root, ["install-service"], env)).code).toBe(0);
    const log = () =>
      readFileSync(join(stubs, "log"), "utf8")
        .split("\n")
        .filter((l) => l && !l.startsWith("--user show"));
    const installCalls = log().length;
    expect((await worker(root, ["update"], env)).json()).toMatchObject({ updated: false, service_restarted: false });
    expect(log().length).toBe(installCalls);
    const path = join(root, "profiles", id, "profile.json");
    writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, "utf8")), runtime_sha256: "f".repeat(64) }));
    expect((await worker(root, ["update"], env)).json()).toMatchObject({ updated: true, service_restarted: true });
    expect(log().slice(installCalls)).toEqual(["--user restart local-shell-mcp-worker.service"]);
    // An older unit (here: without RestartPreventExitStatus) is repaired by the next update.
    const unit = join(home, ".config", "systemd", "user", "local-shell-mcp-worker.service");
    const current = readFileSync(unit, "utf8");
    writeFileSync(unit, current.replace("RestartPreventExitStatus=78\n", ""));
    const before = log().length;
    expect((await worker(root, ["update"], env)).json()).toMatchObject({ updated: false, service_restarted: true });
    expect(readFileSync(unit, "utf8")).toBe(current);
    expect(log().slice(before)).toEqual([
      "--user daemon-reload",
      "--user enable --now local-shell-mcp-worker.service",
      "--user restart local-shell-mcp-worker.service",
    ]);
  }, 60_000);

  test("update refuses a numeric downgrade unless --force", async () => {
    const { root, id } = await joinedRoot();
    const path = join(root, "profiles", id, "profile.json");
    writeFileSync(
      path,
      JSON.stringify({
        ...JSON.parse(readFileSync(path, "utf8")),
        runtime_version: "99.0.0",
        runtime_sha256: "c".repeat(64),
      }),
    );
    const refused = await worker(root, ["update"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`refusing worker runtime downgrade from 99.0.0 to ${manifest.bundle_version}`);
    expect(JSON.parse(readFileSync(path, "utf8")).runtime_sha256).toBe("c".repeat(64));
    const forced = await worker(root, ["update", "--force"]);
    expect(forced.code).toBe(0);
    expect(forced.json()).toMatchObject({ updated: true, version: manifest.bundle_version });
  }, 60_000);

  test("update refuses a controller whose manifest redirects to another origin", async () => {
    // A second listener that only redirects: the profile names it as its server.
    const redirector = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: () => Response.redirect(`${controller.url}/remote/worker-bundle.tgz?manifest=1`, 302),
    });
    try {
      const { root, id } = await joinedRoot();
      const path = join(root, "profiles", id, "profile.json");
      writeFileSync(
        path,
        JSON.stringify({ ...JSON.parse(readFileSync(path, "utf8")), server: `http://127.0.0.1:${redirector.port}` }),
      );
      const r = await worker(root, ["update"]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain("the controller redirected to another origin");
    } finally {
      await redirector.stop(true);
    }
  }, 60_000);

  test("migrate adopts a Python 4.3.0 worker state once, keeping the legacy files", async () => {
    const root = join(dir(), "legacy");
    mkdirSync(root, { mode: 0o700 });
    const workdir = dir();
    const legacy = { server: `${controller.url}/`, name: "old-box", access: "lsmcp_wk_legacyTOKEN", workdir };
    writeFileSync(join(root, "identity.json"), JSON.stringify(legacy), { mode: 0o600 });
    const r = await worker(root, ["migrate"]);
    expect(r.stderr).toBe("");
    const out = r.json();
    expect(out).toMatchObject({
      schema_version: 1,
      runtime_sha256: manifest.sha256,
      runtime_version: manifest.bundle_version,
      server: controller.url,
      name: "old-box",
      workdir,
    });
    expect(out.profile_id).toMatch(/^p_[0-9a-f]{16}$/);
    expect(out.reconnect_command).toBe(`${join(root, "run")} ${out.profile_id}`);
    const identity = JSON.parse(readFileSync(join(root, "profiles", out.profile_id, "identity.json"), "utf8"));
    expect(identity).toEqual({
      server: controller.url,
      name: "old-box",
      token: "lsmcp_wk_legacyTOKEN",
      workdir,
      profile_id: out.profile_id,
      migration_source: "legacy-single-worker",
    });
    expect(mode(join(root, "profiles", out.profile_id, "identity.json"))).toBe("600");
    expect(JSON.parse(readFileSync(join(root, "legacy-profile.json"), "utf8"))).toMatchObject({
      schema_version: 1,
      profile_id: out.profile_id,
    });
    expect(JSON.parse(readFileSync(join(root, "identity.json"), "utf8"))).toEqual(legacy);
    // The secret stays in identity.json: not in the output, not in profile.json.
    expect(r.stdout).not.toContain("legacyTOKEN");
    expect(readFileSync(join(root, "profiles", out.profile_id, "profile.json"), "utf8")).not.toContain("legacyTOKEN");
    const again = (await worker(root, ["migrate"])).json();
    expect(again.profile_id).toBe(out.profile_id);
    expect(readdirSync(join(root, "profiles"))).toEqual([out.profile_id]);
    expect((await worker(join(dir(), "empty"), ["migrate"])).stderr).toContain("there is no legacy worker identity");
  }, 60_000);
});
