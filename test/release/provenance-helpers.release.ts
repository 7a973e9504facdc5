/**
 * Release verification (scripts/test-release, not the default suite): the Linux helpers of both CPUs
 * and the musl targets' libstdc++.so.6, rebuilt from their pinned inputs, have the digests
 * docs/provenance.md records. A cold cache cross-builds musl, libevent, ncurses and tmux for arm64.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { buildAndDigestHelpers, differences, parse } from "../../release/provenance.ts";
import { needsRoot, ROOT } from "../helpers/harness.ts";

const recorded = parse(readFileSync(join(ROOT, "docs", "provenance.md"), "utf8"));
const fix = "if the change is deliberate: bun scripts/provenance.ts --write";

describe("provenance record: helpers rebuilt from the pins", () => {
  // The arm64 build runs its helpers under qemu, which it registers with binfmt_misc.
  const noRoot = needsRoot("the arm64 helper build registers qemu-aarch64 with binfmt_misc");
  const name = "helpers and the musl libstdc++ built from the pinned inputs have the recorded digests (both CPUs)";
  test.skipIf(noRoot)(
    name,
    () => {
      const helpers = buildAndDigestHelpers(ROOT);
      expect(helpers.size).toBe(6); // lsm-runner and tmux per CPU, and the musl targets' libstdc++.so.6
      const recordedHelpers = new Map([...recorded].filter(([k]) => helpers.has(k)));
      expect(differences(recordedHelpers, helpers), fix).toEqual([]);
    },
    3_600_000,
  ); // cold: the arm64 cross build alone took over 20 minutes on a busy 2-core machine
});
