/**
 * All six release archives (slow: six compiles). Named `.release.ts` so the default suite does not
 * collect it; run it on its own: bun test --timeout 600000 ./test/release/all-targets.release.ts
 * (LSM_RELEASE_OUT=DIR: test archives already built with `bun scripts/release.ts --out DIR`.)
 *
 * - every archive and SHA256SUMS verify;
 * - macOS: Mach-O for the right CPU, no tmux, no Linux runner, no Linux licences for them;
 * - musl: linked against the musl loader, embeds its CPU's static helpers, ships the recorded
 *   lib/libstdc++.so.6 (native/libstdcxx-musl/build.sh) which covers every symbol the executable
 *   needs beyond musl, and runs in an Alpine-like root (Debian's musl + static busybox, no glibc;
 *   arm64 under qemu-user) through the same checks as the glibc smoke tests.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { parse } from "../../release/provenance.ts";
import { TARGET_NAMES, TARGETS } from "../../release/targets.ts";
import { ROOT, tempDir, type TempDir } from "../helpers/harness.ts";
import { runsInRoot } from "./checks.ts";
import { inRoot, isRoot, killRootProcesses, makeRoot, unpackInto } from "./roots.ts";

const recorded = parse(readFileSync(join(ROOT, "docs", "provenance.md"), "utf8"));
let dir: TempDir;
let out: string;
const unpack = (target: string): string => {
  const to = join(dir.path, "unpacked", target);
  mkdirSync(to, { recursive: true });
  expect(
    Bun.spawnSync(["tar", "-xzf", join(out, `local-shell-mcp-${pkg.version}-${target}.tar.gz`), "-C", to]).exitCode,
  ).toBe(0);
  return join(to, `local-shell-mcp-${pkg.version}-${target}`);
};
const helper = (cpu: string, name: string) => readFileSync(join(ROOT, "build", "native", cpu, name));

// LSM_RELEASE_OUT=DIR tests the archives already built there (bun scripts/release.ts --out DIR).
beforeAll(() => {
  dir = tempDir("lsm-release-all-");
  out = process.env.LSM_RELEASE_OUT || join(dir.path, "out");
  if (process.env.LSM_RELEASE_OUT) return;
  const r = Bun.spawnSync([process.execPath, join(ROOT, "scripts", "release.ts"), "--out", out], {
    cwd: ROOT,
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`release.ts failed: ${r.stderr.toString().slice(-3000)}`);
}, 3_600_000);
afterAll(() => dir?.[Symbol.dispose]());

describe("all six release archives", () => {
  test("six archives, each with its .sha256, all in SHA256SUMS, all verifying", () => {
    const archives = readdirSync(out)
      .filter((f) => f.endsWith(".tar.gz"))
      .sort();
    expect(archives).toEqual(TARGET_NAMES.map((t) => `local-shell-mcp-${pkg.version}-${t}.tar.gz`).sort());
    expect(readFileSync(join(out, "SHA256SUMS"), "utf8").trim().split("\n")).toHaveLength(6);
    for (const f of ["SHA256SUMS", ...archives.map((a) => `${a}.sha256`)])
      expect(Bun.spawnSync(["sha256sum", "-c", f], { cwd: out }).exitCode).toBe(0);
  });

  for (const target of ["darwin-x64", "darwin-arm64"]) {
    test(`${target}: Mach-O for its CPU, no tmux, no Linux runner`, () => {
      const folder = unpack(target);
      expect(Bun.spawnSync(["file", "-b", join(folder, "local-shell-mcp")]).stdout.toString()).toMatch(
        TARGETS[target]!.fileSays,
      );
      const exe = readFileSync(join(folder, "local-shell-mcp"));
      for (const cpu of ["linux-x64", "linux-arm64"])
        for (const name of ["lsm-runner", "tmux"]) expect(exe.indexOf(helper(cpu, name))).toBe(-1);
      const licences = readdirSync(join(folder, "licenses"));
      expect(licences).not.toContain("tmux-COPYING.txt");
      expect(licences).toContain("bun.txt");
      const quick = readFileSync(join(folder, "QUICKSTART.txt"), "utf8");
      expect(quick).toContain("the macOS archives are built and unit-tested");
      expect(quick).toContain("not exercised on a Mac by this project's CI");
      // The launchd containment (src/native/macos/) is in the executable, not a failing placeholder.
      expect(exe.indexOf("local-shell-mcp.bounded.")).toBeGreaterThan(0);
      expect(exe.indexOf("proc_pidinfo")).toBeGreaterThan(0);
    });
  }

  for (const [target, cpu, loader] of [
    ["linux-x64-musl", "linux-x64", "ld-musl-x86_64.so.1"],
    ["linux-arm64-musl", "linux-arm64", "ld-musl-aarch64.so.1"],
  ] as const) {
    test(`${target}: musl-linked, embeds the recorded static ${cpu} helpers, ships the recorded libstdc++`, () => {
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
      const lib = readFileSync(join(folder, "lib", "libstdc++.so.6"));
      expect(new Bun.CryptoHasher("sha256").update(lib).digest("hex")).toBe(
        recorded.get(`${target} lib/libstdc++.so.6 sha256`)!,
      );
      for (const f of ["libstdc++-COPYRIGHT.txt", "GPL-3.0.txt"])
        expect(readdirSync(join(folder, "licenses"))).toContain(f);
      const quick = readFileSync(join(folder, "QUICKSTART.txt"), "utf8");
      expect(quick).toContain("apk add libstdc++ bash");
      expect(quick).toContain("install -m 0644 lib/libstdc++.so.6 /usr/local/lib/");
    });

    // What the executable imports and musl does not provide must all come from the shipped library
    // (an imported symbol missing from both stops the executable at start-up on any musl host).
    // Root is needed to make the musl root, whose libc tells what musl provides.
    test.skipIf(!isRoot)(`${target}: lib/libstdc++.so.6 defines every symbol the executable needs beyond musl`, () => {
      const folder = unpack(target);
      const root = makeRoot(target === "linux-x64-musl" ? "musl-amd64" : "musl-arm64");
      const libc = dynamicSymbols(join(root, "lib", loader));
      const lib = dynamicSymbols(join(folder, "lib", "libstdc++.so.6"));
      const exe = dynamicSymbols(join(folder, "local-shell-mcp"));
      const copies = Bun.spawnSync(["readelf", "-rW", join(folder, "local-shell-mcp")])
        .stdout.toString()
        .split("\n")
        .filter((l) => /_COPY /.test(l))
        .map((l) => l.trim().split(/\s+/)[4]!);
      const needed = [...exe.undefinedStrong, ...copies].filter((n) => !libc.defined.has(n));
      expect(needed.length).toBeGreaterThan(30); // the C++ runtime part: std::, __cxa_*, type_info vtables
      expect(needed.filter((n) => !lib.defined.has(n))).toEqual([]);
      // And the library itself needs nothing beyond musl.
      expect([...lib.undefinedStrong].filter((n) => !libc.defined.has(n))).toEqual([]);
    });
  }
});

/** Defined and strongly-undefined dynamic symbols of an ELF file of any CPU (readelf is CPU-neutral). */
function dynamicSymbols(file: string): { defined: Set<string>; undefinedStrong: Set<string> } {
  const defined = new Set<string>();
  const undefinedStrong = new Set<string>();
  for (const line of Bun.spawnSync(["readelf", "--dyn-syms", "-W", file]).stdout.toString().split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8 || !/^\d+:$/.test(f[0]!)) continue;
    const name = f[7]!.replace(/@.*$/, "");
    if (!name) continue;
    if (f[6] === "UND") {
      if (f[4] === "GLOBAL") undefinedStrong.add(name);
    } else defined.add(name);
  }
  return { defined, undefinedStrong };
}

// The musl archives run where there is no glibc: an Alpine-like root with Debian's musl and a
// static busybox (arm64 under qemu-user), once without the library (it must refuse to start and
// say what is missing), then with lib/libstdc++.so.6 installed as QUICKSTART.txt says.
describe("musl archives in a musl-only root", () => {
  for (const [target, flavour] of [
    ["linux-x64-musl", "musl-amd64"],
    ["linux-arm64-musl", "musl-arm64"],
  ] as const) {
    // Root is needed to chroot into the musl root.
    test.skipIf(!isRoot)(
      `${target}: --version, MCP tools/list, contained bash, embedded tmux`,
      async () => {
        const root = makeRoot(flavour);
        const folder = `local-shell-mcp-${pkg.version}-${target}`;
        const unpacked = unpackInto(root, join(out, `${folder}.tar.gz`), target);
        // Installed into the cached root for this run and removed after it: two LSM_RELEASE_ALL runs
        // on one machine must not overlap (the default suite never uses the musl roots).
        const installed = join(root, "usr", "local", "lib", "libstdc++.so.6");
        try {
          expect(existsSync(installed)).toBe(false);
          const bare = Bun.spawnSync(
            inRoot(root, [`${unpacked.inside}/${folder}/local-shell-mcp`, "--version"], { PATH: "/bin" }),
            { stdout: "pipe", stderr: "pipe" },
          );
          expect(bare.exitCode).not.toBe(0);
          expect(bare.stderr.toString()).toContain("Error loading shared library libstdc++.so.6");
          cpSync(join(unpacked.host, folder, "lib", "libstdc++.so.6"), installed);
          await runsInRoot(root, unpacked.inside, folder, target);
        } finally {
          killRootProcesses(root);
          rmSync(installed, { force: true });
          rmSync(unpacked.host, { recursive: true, force: true });
        }
      },
      600_000,
    );
  }
});
