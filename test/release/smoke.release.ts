/**
 * Release archives for linux-x64 and linux-arm64, built by scripts/release.ts and run in bare Debian
 * roots (no Bun, Node, tmux or compiler; arm64 through qemu-user): checksums, layout, --version,
 * MCP initialize + tools/list, contained bash, and a persistent shell through the embedded tmux.
 * Needs root (chroot, mounts in a private namespace) and the packages .ci/run installs.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { needsRoot, ROOT, tempDir, type TempDir } from "../helpers/harness.ts";
import { parse } from "../../release/provenance.ts";
import { quickstartAsUser, runsInRoot } from "./checks.ts";
import { killRootProcesses, makeRoot, removeOurFolders, unpackInto } from "./roots.ts";

// LSM_SMOKE_TARGETS=linux-x64 narrows the run while working on one target; CI runs both.
const TARGETS = [
  { target: "linux-x64", root: "amd64" as const, cpu: /x86-64/ },
  { target: "linux-arm64", root: "arm64" as const, cpu: /ARM aarch64/ },
].filter((t) => !process.env.LSM_SMOKE_TARGETS || process.env.LSM_SMOKE_TARGETS.split(",").includes(t.target));
const recorded = parse(readFileSync(join(ROOT, "docs", "provenance.md"), "utf8"));
let dir: TempDir;
let out: string;
const roots = new Map<string, string>();

// Root is needed for chroot and the mounts; without it the archives cannot be run as a user would.
describe.skipIf(needsRoot("the bare root filesystems are made with debootstrap and entered with chroot"))(
  "release archives (linux-x64, linux-arm64)",
  () => {
    beforeAll(async () => {
      dir = tempDir("lsm-release-");
      out = join(dir.path, "out");
      for (const t of TARGETS) roots.set(t.target, makeRoot(t.root));
      const r = Bun.spawnSync(
        [process.execPath, join(ROOT, "scripts", "release.ts"), ...TARGETS.map((t) => t.target), "--out", out],
        { cwd: ROOT, stderr: "pipe" },
      );
      if (r.exitCode !== 0) throw new Error(`release.ts failed: ${r.stderr.toString().slice(-3000)}`);
    }, 3_600_000); // a cold cache cross-builds musl and tmux for arm64 and debootstraps an arm64 root under qemu

    afterAll(() => {
      for (const root of roots.values()) {
        killRootProcesses(root);
        removeOurFolders(root);
      }
      dir?.[Symbol.dispose]();
    });

    test("each archive and SHA256SUMS verify with sha256sum -c; a changed byte does not", () => {
      const files = readdirSync(out).sort();
      const names = TARGETS.map((t) => `local-shell-mcp-${pkg.version}-${t.target}.tar.gz`);
      expect(files).toEqual([...names.flatMap((n) => [n, `${n}.sha256`]), "SHA256SUMS"].sort());
      for (const f of ["SHA256SUMS", ...names.map((n) => `${n}.sha256`)]) {
        const r = Bun.spawnSync(["sha256sum", "-c", f], { cwd: out, stdout: "pipe", stderr: "pipe" });
        expect(r.exitCode).toBe(0);
      }
      const bad = readFileSync(join(out, "SHA256SUMS"), "utf8").replace(/^./, (c) => (c === "0" ? "1" : "0"));
      const r = Bun.spawnSync(["sha256sum", "-c", "-"], {
        cwd: out,
        stdin: Buffer.from(bad),
        stdout: "pipe",
        stderr: "pipe",
      });
      expect(r.exitCode).not.toBe(0);
    });

    // Reproducible: the same tree copied to another folder (its own path and build/ folder) gives the
    // same linux-x64 archive, byte for byte. A build path, time, owner or order leaking in shows here.
    test.skipIf(!TARGETS.some((t) => t.target === "linux-x64"))(
      "reproducible: linux-x64 again from a copy in another folder, same bytes",
      () => {
        const epoch = Bun.spawnSync(["git", "-C", ROOT, "log", "-1", "--format=%ct"]).stdout.toString().trim();
        expect(epoch).toMatch(/^\d+$/);
        const copy = join(dir.path, "second", "tree");
        const files = Bun.spawnSync(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
          .stdout.toString()
          .split("\0")
          .filter(Boolean);
        for (const f of files) {
          mkdirSync(dirname(join(copy, f)), { recursive: true });
          if (existsSync(join(ROOT, f))) cpSync(join(ROOT, f), join(copy, f));
        }
        expect(Bun.spawnSync(["cp", "-al", join(ROOT, "node_modules"), join(copy, "node_modules")]).exitCode).toBe(0);
        const second = join(dir.path, "b", "elsewhere");
        const r = Bun.spawnSync([process.execPath, join(copy, "scripts", "release.ts"), "linux-x64", "--out", second], {
          cwd: copy,
          env: { ...process.env, SOURCE_DATE_EPOCH: epoch },
          stderr: "pipe",
        });
        if (r.exitCode !== 0) throw new Error(`release.ts in the copy failed: ${r.stderr.toString().slice(-2000)}`);
        const name = `local-shell-mcp-${pkg.version}-linux-x64.tar.gz`;
        const a = readFileSync(join(out, name));
        const b = readFileSync(join(second, name));
        expect(a.length).toBeGreaterThan(10_000_000);
        expect(Buffer.compare(a, b)).toBe(0);
        expect(readFileSync(join(second, `${name}.sha256`), "utf8")).toBe(
          readFileSync(join(out, `${name}.sha256`), "utf8"),
        );
        // The gzip header has no time and no name (RFC 1952: MTIME in bytes 4..7, FLG bit 3 = FNAME).
        expect(a.readUInt32LE(4)).toBe(0);
        expect(a[3]! & 0x08).toBe(0);
      },
      1_800_000,
    ); // a second linux-x64 compile on a busy machine

    for (const t of TARGETS) {
      describe(t.target, () => {
        const archive = () => join(out, `local-shell-mcp-${pkg.version}-${t.target}.tar.gz`);
        let unpacked: { inside: string; host: string };
        const folder = `local-shell-mcp-${pkg.version}-${t.target}`;
        beforeAll(() => {
          unpacked = unpackInto(roots.get(t.target)!, archive(), t.target);
        });

        test("one folder: executable, docs, licences (tmux, libevent, ncurses, mimalloc, musl, Bun, npm)", () => {
          const list = Bun.spawnSync(["tar", "-tzvf", archive()]).stdout.toString().trim().split("\n");
          for (const line of list)
            expect(line).toMatch(new RegExp(`^(-rw-r--r--|-rwxr-xr-x|drwxr-xr-x) 0/0 .* ${folder}/`));
          const names = list.map((l) => l.split(" ").pop()!);
          for (const f of [
            "local-shell-mcp",
            "README.md",
            "QUICKSTART.txt",
            "LICENSE",
            "NOTICE",
            "licenses/tmux-COPYING.txt",
            "licenses/libevent-LICENSE.txt",
            "licenses/ncurses-COPYING.txt",
            "licenses/mimalloc-LICENSE.txt",
            "licenses/musl-COPYRIGHT.txt",
            "licenses/bun.txt",
          ]) {
            expect(names).toContain(`${folder}/${f}`);
          }
          expect(names.some((n) => n.startsWith(`${folder}/licenses/npm/@modelcontextprotocol__sdk@`))).toBe(true);
          const file = Bun.spawnSync(["file", "-b", join(unpacked.host, folder, "local-shell-mcp")]).stdout.toString();
          expect(file).toMatch(t.cpu);
          // The executable embeds exactly the helpers docs/provenance.md records for its CPU.
          const exe = readFileSync(join(unpacked.host, folder, "local-shell-mcp"));
          for (const name of ["lsm-runner", "tmux"]) {
            const helper = readFileSync(join(ROOT, "build", "native", t.target, name));
            expect(new Bun.CryptoHasher("sha256").update(helper).digest("hex")).toBe(
              recorded.get(`${t.target} ${name} sha256`)!,
            );
            expect(exe.indexOf(helper)).toBeGreaterThan(0);
          }
          expect(readFileSync(join(unpacked.host, folder, "QUICKSTART.txt"), "utf8")).toContain(
            `sha256sum -c local-shell-mcp-${pkg.version}-${t.target}.tar.gz.sha256`,
          );
          // The archive's README is the user's (release/ARCHIVE-README.md), not the source tree's.
          const readme = readFileSync(join(unpacked.host, folder, "README.md"), "utf8");
          expect(readme).toContain(`# local-shell-mcp ${pkg.version} (${t.target})`);
          expect(readme).not.toContain("docs/");
        });

        test("runs in a bare root: --version, MCP tools/list, contained bash, embedded tmux", async () => {
          await runsInRoot(roots.get(t.target)!, unpacked.inside, folder, t.target);
        }, 300_000);

        test("as an unprivileged user, QUICKSTART steps 1-5 work as written", async () => {
          await quickstartAsUser(roots.get(t.target)!, archive(), t.target);
        }, 300_000);
      });
    }
  },
);
