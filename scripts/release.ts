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
const NATIVE_LICENCES = ["tmux-COPYING.txt", "libevent-LICENSE.txt", "ncurses-COPYING.txt", "musl-COPYRIGHT.txt"];
const BUN_LICENCES = ["bun.txt", "LGPL-2.0.txt", "LGPL-2.1.txt", "Apache-2.0.txt"];
/** GCC's libstdc++/libgcc (GPL-3 with the GCC Runtime Library Exception), for lib/ of musl targets. */
const LIBSTDCXX_LICENCES = ["libstdc++-COPYRIGHT.txt", "GPL-3.0.txt"];
const npm = await npmLicences(root);

const MACOS_NOTE = `
macOS
-----
This archive embeds neither tmux nor the Linux containment runner. Bounded
commands (the bash tool, jobs) are contained by the executable itself: each
one runs as a disposable launchd job (launchctl, in your gui/<uid> domain, or
user/<uid>), whose child publishes its resource coalition before the command
is released; cleanup boots the job out and ends every process of yours in that
coalition (found through libproc), including ones that started a new session.
If that cannot be set up or confirmed, the command fails closed with exit 125.

Plainly: the macOS archives are built and unit-tested (the containment's
decisions and orchestration, against a stand-in for launchctl and libproc) but
not exercised on a Mac by this project's CI. Persistent shells (bash with
pty=true) are not available on macOS in this release: they run under the Linux
containment runner, which this archive does not have, so they are refused with
helper_unavailable rather than started uncontained. The executable is not
notarised: the first
start may need
  xattr -d com.apple.quarantine ./local-shell-mcp
`;

const muslNote = (arch: string) => `
musl (Alpine and other musl systems)
------------------------------------
Bun's musl runtime needs libstdc++.so.6 from the system. On Alpine, install the
distribution's copy (it is complete and gets security updates):
  apk add libstdc++ bash
(bash: commands run with /bin/bash unless shell_executable, for example
LOCAL_SHELL_MCP_SHELL_EXECUTABLE=/bin/sh, names another shell.)
Only on a musl system with no packaged libstdc++, use lib/libstdc++.so.6 from
this folder: a subset built from Debian's GCC 12 libraries for musl, enough
for this program but not for other C++ programs (native/libstdcxx-musl in the
source tree). Put it where the musl loader looks, without LD_LIBRARY_PATH:
  install -m 0644 lib/libstdc++.so.6 /usr/local/lib/
musl searches /lib, /usr/local/lib and /usr/lib unless /etc/ld-musl-${arch}.path
exists; if it does, it lists the only folders searched, so install the file
into one of those (or add this folder's lib/ as a line of that file). Without
the library, the executable stops at once with "Error loading shared library
libstdc++.so.6". The embedded tmux and containment runner are static and need
nothing from the system.
`;

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

  for (const f of ["README.md", "LICENSE", "NOTICE"]) copyFileSync(join(root, f), join(stage, f));
  const darwin = spec.helpers === null;
  const quick = readFileSync(join(root, "release", "QUICKSTART.txt"), "utf8")
    .replaceAll("{{VERSION}}", pkg.version)
    .replaceAll("{{TARGET}}", target)
    .replaceAll("{{TMUX_NOTE}}", darwin ? "" : ", no tmux (a static tmux is inside)")
    .replaceAll("{{PLATFORM_NOTE}}", darwin ? MACOS_NOTE : spec.muslLibstdcxx ? muslNote(spec.muslLibstdcxx) : "");
  writeFileSync(join(stage, "QUICKSTART.txt"), quick);
  const libs = spec.muslLibstdcxx ? LIBSTDCXX_LICENCES : [];
  for (const f of [...BUN_LICENCES, ...(darwin ? [] : NATIVE_LICENCES), ...libs]) copyFileSync(join(lic, f), join(stage, "licenses", f));
  if (spec.muslLibstdcxx) await $`bash ${join(root, "native", "libstdcxx-musl", "build.sh")} ${spec.muslLibstdcxx} ${join(stage, "lib", "libstdc++.so.6")}`;
  for (const [file, text] of npm) writeFileSync(join(stage, "licenses", "npm", file), text);
  // Fixed modes, whatever the builder's umask.
  for (const p of walk(work)) chmodSync(p.path, p.dir || p.path === exe ? 0o755 : 0o644);

  const archive = join(out, `${name}.tar.gz`);
  await $`tar -C ${work} --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mtime=@${epoch} -cf - ${name} | gzip -9n > ${archive}`;
  rmSync(work, { recursive: true, force: true });
  const digest = sha256(readFileSync(archive));
  writeFileSync(`${archive}.sha256`, `${digest}  ${name}.tar.gz\n`);
  console.error(`wrote ${archive} (${readFileSync(archive).length} bytes) ${digest}`);
}

// One SHA256SUMS over every archive of this version present in the folder.
const archives = readdirSync(out).filter((f) => f.startsWith(`${pkg.name}-${pkg.version}-`) && f.endsWith(".tar.gz")).sort();
writeFileSync(join(out, "SHA256SUMS"), archives.map((f) => `${sha256(readFileSync(join(out, f)))}  ${f}\n`).join(""));
console.error(`${targets.length} archive(s) in ${Math.round((performance.now() - t0) / 1000)} s; SHA256SUMS lists ${archives.length}`);

function* walk(dir: string): Generator<{ path: string; dir: boolean }> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      yield { path: p, dir: true };
      yield* walk(p);
    } else yield { path: p, dir: false };
  }
}
