/**
 * docs/provenance.md agrees with the build: every pin in the scripts and the lockfile digest; the dev
 * executable embeds exactly the recorded x86_64 helpers; and a swapped helper is caught. Rebuilding
 * the helpers of both CPUs from their pinned inputs (a cross build) is provenance-helpers.release.ts,
 * run by scripts/test-release.
 */
import { describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { collectPins, differences, helperDigests, parse } from "../../release/provenance.ts";
import { binary, ROOT, tempDir } from "../helpers/harness.ts";

const recorded = parse(readFileSync(join(ROOT, "docs", "provenance.md"), "utf8"));
const fix = "if the change is deliberate: bun scripts/provenance.ts --write";

describe("provenance record", () => {
  test("pins and lockfile match the scripts and bun.lock", () => {
    const pins = collectPins(ROOT);
    const recordedPins = new Map([...recorded].filter(([k]) => pins.has(k)));
    expect(differences(recordedPins, pins), fix).toEqual([]);
    expect(recorded.size).toBeGreaterThan(pins.size); // the helper digests are there too
  });

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
