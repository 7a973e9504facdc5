/**
 * The worker bundle is the controller's own executable: the compiled binary serves a deterministic
 * `.tgz` of itself, pinned by digest, behind the Host/Origin guard, only when remote_enabled. The join
 * script comes from the same listener with the server origin quoted safely.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { binary, startHttp, tempDir, type HttpServer, type TempDir } from "../helpers/harness.ts";

const sha256 = (bytes: Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");

interface Manifest {
  schema_version: number;
  bundle_version: string;
  sha256: string;
  size: number;
  url: string;
  platform: string;
}

describe("worker bundle routes", () => {
  let dirs: TempDir[] = [];
  let server: HttpServer;
  let manifest: Manifest;

  const start = async (env: Record<string, string> = {}) => {
    const ws = tempDir();
    const st = tempDir();
    dirs.push(ws, st);
    return startHttp({ workspace: ws.path, state: st.path, env });
  };

  beforeAll(async () => {
    server = await start();
    const res = await fetch(`${server.url}/remote/worker-bundle.tgz?manifest=1`);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    manifest = (await res.json()) as Manifest;
  }, 120_000);

  afterAll(async () => {
    await server?.stop();
    for (const d of dirs) d[Symbol.dispose]();
    dirs = [];
  });

  test("the manifest names this build's version, platform and a digest-qualified relative url", () => {
    const version = Bun.spawnSync([binary(), "--version"]).stdout.toString().split(" ");
    expect(manifest.schema_version).toBe(1);
    expect(manifest.bundle_version).toBe(version[1]!);
    expect(manifest.platform).toBe(version[2]!);
    expect(manifest.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(manifest.url).toBe(`/remote/worker-bundle.tgz?sha256=${manifest.sha256}`);
    expect(manifest.size).toBeGreaterThan(0);
    expect(manifest.size).toBeLessThanOrEqual(256 * 1024 * 1024);
  });

  test("the bundle is a normalised tar.gz holding exactly the controller's executable", async () => {
    const res = await fetch(`${server.url}${manifest.url}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect(bytes.length).toBe(manifest.size);
    expect(sha256(bytes)).toBe(manifest.sha256);
    // gzip: magic, deflate, no flags (no file name), mtime 0.
    expect([...bytes.subarray(0, 8)]).toEqual([0x1f, 0x8b, 8, 0, 0, 0, 0, 0]);
    using out = tempDir();
    await Bun.write(join(out.path, "b.tgz"), bytes);
    const list = Bun.spawnSync(["tar", "--numeric-owner", "-tvzf", join(out.path, "b.tgz")])
      .stdout.toString()
      .trim()
      .split("\n");
    expect(list).toHaveLength(1);
    expect(list[0]).toMatch(/^-rwxr-xr-x 0\/0 +\d+ 1970-01-01 00:00 local-shell-mcp$/);
    expect(Bun.spawnSync(["tar", "-xzf", join(out.path, "b.tgz"), "-C", out.path]).exitCode).toBe(0);
    expect(sha256(readFileSync(join(out.path, "local-shell-mcp")))).toBe(sha256(readFileSync(binary())));
  });

  test("the same executable gives the same digest in another process with another state dir", async () => {
    await using other = await start();
    const again = (await (await fetch(`${other.url}/remote/worker-bundle.tgz?manifest=1`)).json()) as Manifest;
    expect(again.sha256).toBe(manifest.sha256);
    expect(again.size).toBe(manifest.size);
  }, 120_000);

  test("a stale or malformed digest is refused with a JSON error", async () => {
    const stale = await fetch(`${server.url}/remote/worker-bundle.tgz?sha256=${"0".repeat(64)}`);
    expect(stale.status).toBe(404);
    expect(await stale.json()).toMatchObject({
      ok: false,
      error: "bundle_not_found",
      message: "worker bundle digest is no longer available",
    });
    const bad = await fetch(`${server.url}/remote/worker-bundle.tgz?sha256=XYZ`);
    expect(bad.status).toBe(400);
    const post = await fetch(`${server.url}/remote/worker-bundle.tgz?manifest=1`, { method: "POST" });
    expect(post.status).toBe(405);
  });

  test("the routes sit behind the Host/Origin guard", async () => {
    const port = new URL(server.url).port;
    const res = Bun.spawnSync([
      "curl",
      "-s",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code}",
      "-H",
      "Host: evil.example",
      `http://127.0.0.1:${port}/remote/worker-bundle.tgz?manifest=1`,
    ]);
    expect(res.stdout.toString()).toBe("421");
    const join = Bun.spawnSync([
      "curl",
      "-s",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code}",
      "-H",
      "Origin: https://evil.example",
      `http://127.0.0.1:${port}/join`,
    ]);
    expect(join.stdout.toString()).toBe("403");
  });

  test("the join script is a bash script naming this server, with the invite taken from arguments only", async () => {
    const res = await fetch(`${server.url}/join`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toStartWith("text/x-shellscript");
    expect(res.headers.get("cache-control")).toBe("no-store");
    const script = await res.text();
    expect(script).toStartWith("#!/usr/bin/env bash\n");
    expect(script).toContain(`SERVER='${server.url}'\n`);
    expect(script.trimEnd().endsWith('main "$@"')).toBe(true);
    expect(Bun.spawnSync(["bash", "-n"], { stdin: new TextEncoder().encode(script) }).exitCode).toBe(0);
    // Without an invite it stops before touching anything.
    using home = tempDir();
    const run = Bun.spawnSync(["bash", "-s", "--", "--name", "x"], {
      stdin: new TextEncoder().encode(script),
      env: { PATH: process.env.PATH!, HOME: home.path },
    });
    expect(run.exitCode).toBe(1);
    expect(run.stderr.toString()).toContain("--invite CODE is required");
  });

  test("with remote_enabled=false neither the bundle nor the join script is served", async () => {
    await using off = await start({ LOCAL_SHELL_MCP_REMOTE_ENABLED: "false" });
    expect((await fetch(`${off.url}/remote/worker-bundle.tgz?manifest=1`)).status).toBe(404);
    expect((await fetch(`${off.url}/join`)).status).toBe(404);
  }, 60_000);
});
