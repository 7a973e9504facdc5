/**
 * Builds the release archives under release/out/ (or --out DIR):
 *   local-shell-mcp-<version>-<target>.tar.gz   one folder: executable, README.md, QUICKSTART.txt,
 *                                               LICENSE, NOTICE, licenses/ (third-party texts);
 *                                               musl targets also lib/libstdc++.so.6
 *   local-shell-mcp-<version>-<target>.tar.gz.sha256
 *   SHA256SUMS                                  every archive of this version in the folder
 * Usage: bun scripts/release.ts [TARGET...] [--out DIR]     (default: all six targets)
 *
 * Archives are reproducible: fixed mtime (the commit time, or SOURCE_DATE_EPOCH), owner 0:0,
 * sorted names, fixed modes, and a gzip header without name or time. See release/README.md.
 */
import { $ } from "bun";
import { chmodSync, copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import pkg from "../package.json" with { type: "json" };
import { archiveQuickstart, archiveReadme } from "../release/archive-docs.ts";
import { npmLicences } from "../release/licences.ts";
import { TARGET_NAMES, TARGETS } from "../release/targets.ts";

const root = resolve(import.meta.dir, "..");
let out = join(root, "release", "out");
const wanted: string[] = [];
for (let i = 2; i < process.argv.length; i++) {
  if (process.argv[i] === "--out") out = resolve(process.argv[++i]!);
  else wanted.push(process.argv[i]!);
}
const targets = wanted.length ? wanted : TARGET_NAMES;
for (const t of targets) {
  if (!TARGETS[t]) {
    console.error(`unknown target ${t}; one of: ${TARGET_NAMES.join(", ")}`);
    process.exit(2);
  }
}

const epoch = process.env.SOURCE_DATE_EPOCH ?? (await $`git -C ${root} log -1 --format=%ct`.text()).trim();
if (!/^\d+$/.test(epoch)) throw new Error(`no commit time for SOURCE_DATE_EPOCH: ${epoch}`);
const sha256 = (bytes: Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
const lic = join(root, "release", "licenses");
/** Licence texts per embedded part, as file name in licenses/ → source in release/licenses/. */
const NATIVE_LICENCES = [
  "tmux-COPYING.txt",
  "libevent-LICENSE.txt",
  "ncurses-COPYING.txt",
  "mimalloc-LICENSE.txt",
  "musl-COPYRIGHT.txt",
];
const BUN_LICENCES = ["bun.txt", "LGPL-2.0.txt", "LGPL-2.1.txt", "Apache-2.0.txt"];
/** GCC's libstdc++/libgcc (GPL-3 with the GCC Runtime Library Exception), for lib/ of musl targets. */
const LIBSTDCXX_LICENCES = ["libstdc++-COPYRIGHT.txt", "GPL-3.0.txt"];
const npm = await npmLicences(root);

mkdirSync(out, { recursive: true });
const t0 = performance.now();
for (const target of targets) {
  const spec = TARGETS[target]!;
  const name = `${pkg.name}-${pkg.version}-${target}`;
  const work = join(out, `.stage-${target}`);
  const stage = join(work, name);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(join(stage, "licenses", "npm"), { recursive: true });
  const exe = join(stage, "local-shell-mcp");
  await $`${process.execPath} ${join(root, "scripts", "build.ts")} --target ${target} --outfile ${exe}`;
  const says = (await $`file -b ${exe}`.text()).trim();
  if (!spec.fileSays.test(says)) throw new Error(`${target}: the executable is not what the target needs: ${says}`);

  for (const f of ["LICENSE", "NOTICE"]) copyFileSync(join(root, f), join(stage, f));
  const darwin = spec.helpers === null;
  const musl = spec.muslLibstdcxx ?? null;
  // The archive's README is for the person installing it (release/ARCHIVE-README.md), not the
  // developer README of the source tree: its links resolve inside the unpacked folder.
  writeFileSync(join(stage, "README.md"), archiveReadme(root, pkg.version, target, darwin, musl));
  writeFileSync(join(stage, "QUICKSTART.txt"), archiveQuickstart(root, pkg.version, target, darwin, musl));
  const libs = spec.muslLibstdcxx ? LIBSTDCXX_LICENCES : [];
  for (const f of [...BUN_LICENCES, ...(darwin ? [] : NATIVE_LICENCES), ...libs])
    copyFileSync(join(lic, f), join(stage, "licenses", f));
  if (spec.muslLibstdcxx) {
    const libstdcxx = join(stage, "lib", "libstdc++.so.6");
    await $`bash ${join(root, "native", "libstdcxx-musl", "build.sh")} ${spec.muslLibstdcxx} ${libstdcxx}`;
  }
  for (const [file, text] of npm) writeFileSync(join(stage, "licenses", "npm", file), text);
  // Fixed modes, whatever the builder's umask.
  for (const p of walk(work)) chmodSync(p.path, p.dir || p.path === exe ? 0o755 : 0o644);

  const archive = join(out, `${name}.tar.gz`);
  const tarFlags = ["--sort=name", "--format=gnu", "--owner=0", "--group=0", "--numeric-owner", `--mtime=@${epoch}`];
  await $`tar -C ${work} ${tarFlags} -cf - ${name} | gzip -9n > ${archive}`;
  rmSync(work, { recursive: true, force: true });
  const digest = sha256(readFileSync(archive));
  writeFileSync(`${archive}.sha256`, `${digest}  ${name}.tar.gz\n`);
  console.error(`wrote ${archive} (${readFileSync(archive).length} bytes) ${digest}`);
}

// One SHA256SUMS over every archive of this version present in the folder.
const archives = readdirSync(out)
  .filter((f) => f.startsWith(`${pkg.name}-${pkg.version}-`) && f.endsWith(".tar.gz"))
  .sort();
writeFileSync(join(out, "SHA256SUMS"), archives.map((f) => `${sha256(readFileSync(join(out, f)))}  ${f}\n`).join(""));
console.error(
  `${targets.length} archive(s) in ${Math.round((performance.now() - t0) / 1000)} s; SHA256SUMS ` +
    `lists ${archives.length}`,
);

function* walk(dir: string): Generator<{ path: string; dir: boolean }> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      yield { path: p, dir: true };
      yield* walk(p);
    } else yield { path: p, dir: false };
  }
}
