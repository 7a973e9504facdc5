/**
 * docs/provenance.md agrees with the build: every pin in the scripts, the lockfile digest, and the
 * SHA-256 of each Linux helper per CPU; the dev executable embeds exactly the recorded x86_64
 * helpers; and a swapped helper is caught.
 */
import { describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { buildAndDigestHelpers, collectPins, differences, helperDigests, parse } from "../../release/provenance.ts";
import { binary, needsRoot, ROOT, tempDir } from "../helpers/harness.ts";

const recorded = parse(readFileSync(join(ROOT, "docs", "provenance.md"), "utf8"));
const fix = "if the change is deliberate: bun scripts/provenance.ts --write";

describe("provenance record", () => {
  test("pins and lockfile match the scripts and bun.lock", () => {
    const pins = collectPins(ROOT);
    const recordedPins = new Map([...recorded].filter(([k]) => pins.has(k)));
    expect(differences(recordedPins, pins), fix).toEqual([]);
    expect(recorded.size).toBeGreaterThan(pins.size); // the helper digests are there too
  });

  // The arm64 build runs its helpers under qemu, which it registers with binfmt_misc.
  test.skipIf(needsRoot("the arm64 helper build registers qemu-aarch64 with binfmt_misc"))("helpers and the musl libstdc++ built from the pinned inputs have the recorded digests (both CPUs)", () => {
    const helpers = buildAndDigestHelpers(ROOT);
    expect(helpers.size).toBe(6); // lsm-runner and tmux per CPU, and the musl targets' libstdc++.so.6
    const recordedHelpers = new Map([...recorded].filter(([k]) => helpers.has(k)));
    expect(differences(recordedHelpers, helpers), fix).toEqual([]);
  }, 1_200_000); // a cold cache cross-builds musl and tmux for arm64

  test("the dev executable embeds the recorded x86_64 helpers", () => {
    const exe = readFileSync(binary());
    for (const name of ["lsm-runner", "tmux"]) {
      const bytes = readFileSync(join(ROOT, "build", "native", name));
      const digest = new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
      expect(digest).toBe(recorded.get(`linux-x64 ${name} sha256`)!);
      expect(exe.indexOf(bytes)).toBeGreaterThan(0);
    }
  });

  test("a swapped helper is reported by name", () => {
    using dir = tempDir("lsm-prov-swap-");
    mkdirSync(join(dir.path, "linux-x64"));
    copyFileSync(join(ROOT, "build", "native", "lsm-runner"), join(dir.path, "linux-x64", "lsm-runner"));
    // The "tmux" here is really the runner: same file name, other bytes.
    copyFileSync(join(ROOT, "build", "native", "lsm-runner"), join(dir.path, "linux-x64", "tmux"));
    const actual = helperDigests({ "linux-x64": join(dir.path, "linux-x64") });
    const diff = differences(new Map([...recorded].filter(([k]) => actual.has(k))), actual);
    expect(diff).toHaveLength(1);
    expect(diff[0]).toStartWith("linux-x64 tmux sha256: recorded ");
  });
});
