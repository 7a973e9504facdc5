/**
 * Start-up time of each Linux release executable inside its bare root: `--version`, 20 runs, p50.
 * Usage (root; after scripts/release.ts): bun release/cold-start.ts [OUT_DIR]
 * linux-arm64 runs under qemu-user here, so its figure is emulated time, not an arm64 machine's.
 */
import { mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import pkg from "../package.json" with { type: "json" };
import { inRoot, makeRoot, unpackInto } from "../test/release/roots.ts";

const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
for (const [target, flavour] of [["linux-x64", "amd64"], ["linux-arm64", "arm64"]] as const) {
  const root = makeRoot(flavour);
  const { inside, host } = unpackInto(root, join(out, `${pkg.name}-${pkg.version}-${target}.tar.gz`), `cold-${target}`);
  mkdirSync(join(host, "home"), { recursive: true });
  const exe = `${inside}/${pkg.name}-${pkg.version}-${target}/local-shell-mcp`;
  // Timed inside the root, so the namespace and chroot set-up are not counted.
  const loop = `for i in $(seq 20); do s=$(date +%s%N); "$0" --version >/dev/null || exit 1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); done`;
  const r = Bun.spawnSync(inRoot(root, ["/bin/bash", "-c", loop, exe], { HOME: `${inside}/home`, PATH: "/usr/bin:/bin" }), { stdout: "pipe", stderr: "pipe" });
  rmSync(host, { recursive: true, force: true });
  if (r.exitCode !== 0) throw new Error(`${target}: ${r.stderr.toString()}`);
  const us = r.stdout.toString().trim().split("\n").map(Number).sort((a, b) => a - b);
  const p50 = (us[9]! + us[10]!) / 2;
  console.log(`${target}: --version p50 ${(p50 / 1000).toFixed(1)} ms (min ${(us[0]! / 1000).toFixed(1)}, max ${(us[19]! / 1000).toFixed(1)}, n=${us.length})`);
}
