/**
 * All six release archives (slow: six compiles; not in the default suite).
 * Run: LSM_RELEASE_ALL=1 bun test --timeout 600000 test/release/all-targets.test.ts
 *
 * - every archive and SHA256SUMS verify;
 * - macOS: Mach-O for the right CPU, no tmux, no Linux runner, no Linux licences for them;
 * - musl: linked against the musl loader, embeds its CPU's static helpers, and those helpers run in
 *   a root that has nothing but Debian's musl loader and a static busybox (contained double-forked
 *   sleeper, tmux -V). Bun's musl runtime itself also needs a musl libstdc++/libgcc (Alpine:
 *   `apk add libstdc++ libgcc`), which Debian does not package, so the executable is not started there.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, rmSync, mkdirSync, cpSync } from "node:fs";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { parse } from "../../release/provenance.ts";
import { TARGET_NAMES, TARGETS } from "../../release/targets.ts";
import { ROOT, tempDir, type TempDir } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";
import { inRoot, isRoot, makeRoot } from "./roots.ts";

const recorded = parse(readFileSync(join(ROOT, "docs", "provenance.md"), "utf8"));
const enabled = process.env.LSM_RELEASE_ALL === "1";
if (!enabled) console.error("all-targets.test.ts: skipped (six compiles); run it with LSM_RELEASE_ALL=1");
let dir: TempDir;
let out: string;
const unpack = (target: string): string => {
  const to = join(dir.path, "unpacked", target);
  mkdirSync(to, { recursive: true });
  expect(Bun.spawnSync(["tar", "-xzf", join(out, `local-shell-mcp-${pkg.version}-${target}.tar.gz`), "-C", to]).exitCode).toBe(0);
  return join(to, `local-shell-mcp-${pkg.version}-${target}`);
};
const helper = (cpu: string, name: string) => readFileSync(join(ROOT, "build", "native", cpu, name));

// Slow by design (six compiles); enabled with LSM_RELEASE_ALL=1, documented in release/README.md.
describe.skipIf(!enabled)("all six release archives", () => {
  beforeAll(() => {
    dir = tempDir("lsm-release-all-");
    out = join(dir.path, "out");
    const r = Bun.spawnSync([process.execPath, join(ROOT, "scripts", "release.ts"), "--out", out], { cwd: ROOT, stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`release.ts failed: ${r.stderr.toString().slice(-3000)}`);
  }, 3_600_000);
  afterAll(() => dir?.[Symbol.dispose]());

  test("six archives, each with its .sha256, all in SHA256SUMS, all verifying", () => {
    const archives = readdirSync(out).filter((f) => f.endsWith(".tar.gz")).sort();
    expect(archives).toEqual(TARGET_NAMES.map((t) => `local-shell-mcp-${pkg.version}-${t}.tar.gz`).sort());
    expect(readFileSync(join(out, "SHA256SUMS"), "utf8").trim().split("\n")).toHaveLength(6);
    for (const f of ["SHA256SUMS", ...archives.map((a) => `${a}.sha256`)]) expect(Bun.spawnSync(["sha256sum", "-c", f], { cwd: out }).exitCode).toBe(0);
  });

  for (const target of ["darwin-x64", "darwin-arm64"]) {
    test(`${target}: Mach-O for its CPU, no tmux, no Linux runner`, () => {
      const folder = unpack(target);
      expect(Bun.spawnSync(["file", "-b", join(folder, "local-shell-mcp")]).stdout.toString()).toMatch(TARGETS[target]!.fileSays);
      const exe = readFileSync(join(folder, "local-shell-mcp"));
      for (const cpu of ["linux-x64", "linux-arm64"]) for (const name of ["lsm-runner", "tmux"]) expect(exe.indexOf(helper(cpu, name))).toBe(-1);
      const licences = readdirSync(join(folder, "licenses"));
      expect(licences).not.toContain("tmux-COPYING.txt");
      expect(licences).toContain("bun.txt");
      expect(readFileSync(join(folder, "QUICKSTART.txt"), "utf8")).toContain("CI does not run them on a Mac");
    });
  }

  for (const [target, cpu, loader] of [["linux-x64-musl", "linux-x64", "ld-musl-x86_64.so.1"], ["linux-arm64-musl", "linux-arm64", "ld-musl-aarch64.so.1"]] as const) {
    test(`${target}: musl-linked, embeds the recorded static ${cpu} helpers`, () => {
      const folder = unpack(target);
      const exe = join(folder, "local-shell-mcp");
      expect(Bun.spawnSync(["file", "-b", exe]).stdout.toString()).toMatch(TARGETS[target]!.fileSays);
      expect(Bun.spawnSync(["readelf", "-lW", exe]).stdout.toString()).toContain(`/lib/${loader}`);
      const bytes = readFileSync(exe);
      for (const name of ["lsm-runner", "tmux"]) {
        const h = helper(cpu, name);
        expect(new Bun.CryptoHasher("sha256").update(h).digest("hex")).toBe(recorded.get(`${cpu} ${name} sha256`)!);
        expect(bytes.indexOf(h)).toBeGreaterThan(0);
      }
    });
  }
});

// The static helpers need no libc from the host: they run where only musl and busybox exist.
describe.skipIf(!enabled)("static helpers on a musl host", () => {
  // Root is needed to chroot into the musl root.
  test.skipIf(!isRoot)("the x86_64 helpers run in a musl-only root: contained sleeper gone, tmux -V", async () => {
    const root = makeRoot("musl-amd64");
    const inside = `/opt/lsm-musl-${process.pid}`;
    mkdirSync(join(root, inside), { recursive: true });
    try {
      for (const name of ["lsm-runner", "tmux"]) cpSync(join(ROOT, "build", "native", "linux-x64", name), join(root, inside, name));
      const env = { PATH: "/bin", HOME: inside };
      const v = Bun.spawnSync(inRoot(root, [`${inside}/tmux`, "-V"], env), { stdout: "pipe", stderr: "pipe" });
      expect(v.stdout.toString()).toBe("tmux 3.5a\n");
      const script = `cd ${inside} && ( setsid sleep 600 & echo $! > sleeper.pid ) ; while [ ! -s sleeper.pid ]; do :; done; kill -0 $(cat sleeper.pid) && echo sleeper-up`;
      const r = Bun.spawnSync(inRoot(root, [`${inside}/lsm-runner`, "--", "/bin/sh", "-c", script], env), { stdout: "pipe", stderr: "pipe" });
      expect(r.stderr.toString()).toBe("");
      expect(r.stdout.toString()).toBe("sleeper-up\n");
      expect(r.exitCode).toBe(0);
      const sleeper = Number(readFileSync(join(root, inside, "sleeper.pid"), "utf8"));
      expect(sleeper).toBeGreaterThan(1);
      await waitFor(() => !pidAlive(sleeper), { timeoutMs: 20_000, what: "the contained sleeper to be gone" });
    } finally {
      rmSync(join(root, inside), { recursive: true, force: true });
    }
  }, 120_000);
});
