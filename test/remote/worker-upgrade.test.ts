/**
 * Real controllers of other versions (`scripts/build.ts --version-override`): `worker update`
 * installs a newer controller's binary beside the current one and rebinds the profile, refuses an
 * older one unless --force, and the launcher then starts the runtime the profile names.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { binary, ROOT, serverEnv, tempDir, type TempDir } from "../helpers/harness.ts";

interface Controller {
  url: string;
  stop(): Promise<void>;
}

/** `serve --mode mcp` of the given executable on a free loopback port. */
async function serve(exe: string, dirs: () => string): Promise<Controller> {
  const proc = Bun.spawn(
    [
      exe,
      "serve",
      "--mode",
      "mcp",
      "--auth-mode",
      "none",
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--workspace-root",
      dirs(),
      "--state-dir",
      dirs(),
    ],
    {
      env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3" }),
      stdin: "ignore",
      stdout: "ignore",
      stderr: "pipe",
    },
  );
  const reader = proc.stderr.getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`controller exited: ${text}`);
    text += new TextDecoder().decode(value);
    const url = /listening on (http:\/\/[^\s]+)\/mcp/.exec(text)?.[1];
    if (url) {
      void reader.read().then(function drain(r): unknown {
        return r.done ? undefined : reader.read().then(drain);
      });
      return {
        url,
        stop: async () => {
          proc.kill("SIGTERM");
          await proc.exited;
        },
      };
    }
  }
}

describe("worker update across controller versions", () => {
  let dirs: TempDir[] = [];
  const dir = () => {
    const d = tempDir("lsm-upg-");
    dirs.push(d);
    return d.path;
  };
  const builds: Record<string, string> = {};

  beforeAll(async () => {
    const out = dir();
    for (const version of ["9.9.9", "0.0.1"]) {
      builds[version] = join(out, `lsm-${version}`);
      const b = Bun.spawn(
        [
          process.execPath,
          join(ROOT, "scripts", "build.ts"),
          "--outfile",
          builds[version]!,
          "--version-override",
          version,
        ],
        { cwd: ROOT, stdout: "ignore", stderr: "pipe" },
      );
      const err = await new Response(b.stderr).text();
      if ((await b.exited) !== 0) throw new Error(`build ${version} failed: ${err}`);
    }
  }, 300_000);

  afterAll(() => {
    for (const d of dirs) d[Symbol.dispose]();
    dirs = [];
  });

  async function worker(root: string, args: string[]) {
    const proc = Bun.spawn([binary(), "worker", ...args], {
      env: {
        PATH: process.env.PATH!,
        HOME: dir(),
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
        LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER: "unsupported",
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
    return { code, stdout, stderr };
  }

  test("a newer controller's runtime is installed and bound; an older one needs --force", async () => {
    const current = await serve(binary(), dir);
    const newer = await serve(builds["9.9.9"]!, dir);
    const older = await serve(builds["0.0.1"]!, dir);
    try {
      // A worker joined to the current controller (what the join script leaves behind).
      const root = join(dir(), "w");
      const id = "p_00aa11bb22cc33dd";
      const manifest = (await (await fetch(`${current.url}/remote/worker-bundle.tgz?manifest=1`)).json()) as {
        sha256: string;
        bundle_version: string;
      };
      const archive = join(dir(), "b.tgz");
      await Bun.write(
        archive,
        await (await fetch(`${current.url}/remote/worker-bundle.tgz?sha256=${manifest.sha256}`)).arrayBuffer(),
      );
      const joined = await worker(root, [
        "install-runtime",
        "--bundle",
        archive,
        "--sha256",
        manifest.sha256,
        "--bundle-version",
        manifest.bundle_version,
        "--profile",
        id,
        "--server",
        current.url,
        "--workdir",
        dir(),
      ]);
      expect(joined.code).toBe(0);
      const profilePath = join(root, "profiles", id, "profile.json");
      const moveTo = (server: string) =>
        writeFileSync(profilePath, JSON.stringify({ ...JSON.parse(readFileSync(profilePath, "utf8")), server }));

      moveTo(newer.url);
      const up = await worker(root, ["update", id]);
      expect(up.stderr).toBe("");
      const upOut = JSON.parse(up.stdout);
      expect(upOut).toMatchObject({
        schema_version: 1,
        action: "update",
        updated: true,
        version: "9.9.9",
        service_restarted: false,
      });
      expect(upOut.sha256).not.toBe(manifest.sha256);
      expect(JSON.parse(readFileSync(profilePath, "utf8"))).toMatchObject({
        runtime_sha256: upOut.sha256,
        runtime_version: "9.9.9",
      });
      expect(readdirSync(join(root, "runtimes")).sort()).toEqual([manifest.sha256, upOut.sha256].sort());
      const installed = Bun.spawnSync([
        join(root, "runtimes", upOut.sha256, "local-shell-mcp"),
        "--version",
      ]).stdout.toString();
      expect(installed).toStartWith("local-shell-mcp 9.9.9 ");

      moveTo(older.url);
      const down = await worker(root, ["update", id]);
      expect(down.code).toBe(1);
      expect(down.stderr).toBe(
        "Status: worker command failed: refusing worker runtime downgrade from 9.9.9 to 0.0.1 (use --force)\n",
      );
      expect(JSON.parse(readFileSync(profilePath, "utf8")).runtime_version).toBe("9.9.9");
      const forced = JSON.parse((await worker(root, ["update", id, "--force"])).stdout);
      expect(forced).toMatchObject({ updated: true, version: "0.0.1" });
      expect(JSON.parse(readFileSync(profilePath, "utf8")).runtime_version).toBe("0.0.1");
    } finally {
      await Promise.all([current.stop(), newer.stop(), older.stop()]);
    }
  }, 300_000);
});
