/**
 * Start-up time of each Linux release executable inside its bare root: `--version`, 20 runs, p50.
 * Usage (root; after scripts/release.ts): bun release/cold-start.ts [OUT_DIR] [TARGET...]
 * arm64 targets run under qemu-user here, so their figures are emulated time, not an arm64
 * machine's. The musl targets run in the musl roots with the archive's lib/libstdc++.so.6 installed
 * in /usr/local/lib for the measurement (as QUICKSTART.txt says), removed afterwards.
 */
import { copyFileSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import pkg from "../package.json" with { type: "json" };
import { inRoot, makeRoot, unpackInto } from "../test/release/roots.ts";

const ROOTS = {
  "linux-x64": "amd64",
  "linux-arm64": "arm64",
  "linux-x64-musl": "musl-amd64",
  "linux-arm64-musl": "musl-arm64",
} as const;
const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
const wanted = process.argv.slice(3);
const targets = (Object.keys(ROOTS) as (keyof typeof ROOTS)[]).filter((t) =>
  wanted.length ? wanted.includes(t) : existsSync(join(out, `${pkg.name}-${pkg.version}-${t}.tar.gz`)),
);
for (const target of targets) {
  const root = makeRoot(ROOTS[target]);
  const { inside, host } = unpackInto(root, join(out, `${pkg.name}-${pkg.version}-${target}.tar.gz`), `cold-${target}`);
  mkdirSync(join(host, "home"), { recursive: true });
  const folder = `${pkg.name}-${pkg.version}-${target}`;
  const exe = `${inside}/${folder}/local-shell-mcp`;
  const lib = join(root, "usr", "local", "lib", "libstdc++.so.6");
  if (target.endsWith("-musl")) copyFileSync(join(host, folder, "lib", "libstdc++.so.6"), lib);
  try {
    // Timed inside the root, so the namespace and chroot set-up are not counted. $EPOCHREALTIME
    // (microseconds) exists in bash 5 and in busybox's ash (the musl roots' /bin/bash runs ash).
    const loop =
      `for i in $(seq 20); do s=$EPOCHREALTIME; "$0" --version >/dev/null || exit 1; e=$EPOCHREALTIME; echo ` +
      `"$s $e"; done`;
    const r = Bun.spawnSync(
      inRoot(root, ["/bin/bash", "-c", loop, exe], { HOME: `${inside}/home`, PATH: "/usr/bin:/bin" }),
      { stdout: "pipe", stderr: "pipe" },
    );
    if (r.exitCode !== 0) throw new Error(`${target}: ${r.stderr.toString()}`);
    const us = r.stdout
      .toString()
      .trim()
      .split("\n")
      .map((l) => {
        const [s0, e0] = l.split(" ").map((x) => Number(x.replace(",", ".")));
        return (e0! - s0!) * 1e6;
      })
      .sort((x, y) => x - y);
    if (us.length !== 20 || us.some((x) => !Number.isFinite(x)))
      throw new Error(`${target}: unexpected timings ${r.stdout.toString()}`);
    const p50 = (us[9]! + us[10]!) / 2;
    console.log(
      `${target}: --version p50 ${(p50 / 1000).toFixed(1)} ms (min ${(us[0]! / 1000).toFixed(1)}, ` +
        `max ${(us[19]! / 1000).toFixed(1)}, n=${us.length})`,
    );
  } finally {
    rmSync(lib, { force: true });
    rmSync(host, { recursive: true, force: true });
  }
}
