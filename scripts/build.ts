/**
 * Builds dist/local-shell-mcp: native helpers first (they are embedded), then one compiled executable.
 * Usage: bun scripts/build.ts [--outfile PATH] [--target NAME] [--version-override X.Y.Z]
 *
 * Without --target: this machine's target, helpers in build/native/ (the dev and test build).
 * With --target (one of release/targets.ts): Bun's runtime for that target, and that target's own
 * helpers from build/native/<cpu>/ (arm64 ones cross-built by native/cross/build-aarch64.sh; none
 * for macOS). The build records its target and a build digest in the executable (`--version`).
 * --version-override replaces package.json's version inside the executable: tests use it to build an
 * older or newer controller for the worker update path; releases never pass it.
 */
import { $, type BunPlugin } from "bun";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { hostTarget, TARGETS } from "../release/targets.ts";
import { buildUi } from "./build-ui.ts";
import { opentuiExternals } from "./opentui-native.ts";

const root = resolve(import.meta.dir, "..");
const option = (name: string): string | undefined =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined;
const outfile = option("--outfile") ? resolve(option("--outfile")!) : join(root, "dist", "local-shell-mcp");
const targetName = option("--target");
const versionOverride = option("--version-override");
if (versionOverride !== undefined && !/^\d+\.\d+\.\d+[0-9A-Za-z.+-]{0,64}$/.test(versionOverride)) {
  console.error("--version-override must look like MAJOR.MINOR.PATCH");
  process.exit(2);
}
if (targetName !== undefined && !TARGETS[targetName]) {
  console.error(`unknown target ${targetName}; one of: ${Object.keys(TARGETS).join(", ")}`);
  process.exit(2);
}
mkdirSync(join(root, "build", "native"), { recursive: true });
mkdirSync(join(root, "dist"), { recursive: true });

const t0 = performance.now();
/** Where the embedded lsm-runner and tmux come from for this build. */
let helperDir = join(root, "build", "native");
if (targetName === undefined) {
  await $`bash ${join(root, "scripts", "build-native.sh")} ${join(root, "build", "native", "lsm-runner")}`;
  // Static tmux for persistent shells (cached by content, so repeated builds only copy it).
  await $`bash ${join(root, "native", "tmux", "build.sh")} ${join(root, "build", "native", "tmux")}`;
} else {
  const cpu = TARGETS[targetName]!.helpers;
  helperDir = join(root, "build", "native", cpu ?? "none");
  mkdirSync(helperDir, { recursive: true });
  if (cpu === "linux-x64") {
    await $`bash ${join(root, "scripts", "build-native.sh")} ${join(helperDir, "lsm-runner")}`;
    await $`bash ${join(root, "native", "tmux", "build.sh")} ${join(helperDir, "tmux")}`.quiet();
  } else if (cpu === "linux-arm64") {
    await $`bash ${join(root, "native", "cross", "build-aarch64.sh")} ${helperDir}`;
  } else {
    // macOS: nothing Linux-specific inside. The imports still need a file; an empty one makes
    // extraction fail with helper_unavailable instead of running a Linux binary.
    for (const f of ["lsm-runner", "tmux"]) writeFileSync(join(helperDir, f), "");
  }
}
// The browser UI, which the server bundle embeds (src/ui/assets.macro.ts); the same on every target.
const ui = await buildUi(root);
const t1 = performance.now();

const sha256 = (bytes: Uint8Array | string) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
const helperDigests = Object.fromEntries(
  ["lsm-runner", "tmux"].map((f) => [f, sha256(readFileSync(join(helperDir, f)))]),
);
const target = targetName ?? hostTarget();

/**
 * The build digest names exactly what went into the executable: the target, Bun, every source
 * file, the manifest and lockfile, and each embedded helper. Same commit and target → same digest.
 */
function buildDigest(): string {
  const h = new Bun.CryptoHasher("sha256");
  h.update(`target ${target}\nbun ${Bun.version}\n`);
  if (versionOverride) h.update(`version ${versionOverride}\n`);
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) files.push(p);
    }
  };
  walk(join(root, "src"));
  files.push(join(root, "package.json"), join(root, "bun.lock"));
  for (const f of files.map((p) => relative(root, p)).sort()) h.update(`${f} ${sha256(readFileSync(join(root, f)))}\n`);
  for (const [name, digest] of Object.entries(helperDigests)) h.update(`helper ${name} ${digest}\n`);
  return h.digest("hex");
}

// Per-target builds point the helper imports (src/native/*.ts import build/native/<name>) at that
// target's folder; the default build leaves them alone.
const helperRemap: BunPlugin = {
  name: "per-target-helpers",
  setup(build) {
    build.onResolve({ filter: /build\/native\/(lsm-runner|tmux)$/ }, (args) => ({
      path: join(helperDir, args.path.split("/").pop()!),
    }));
  },
};

/**
 * OpenTUI (the `tui` command) reaches its native library through one package per platform. Only
 * the linux-x64 one is embedded (src/native/opentui.ts); the others stay external so the build
 * neither needs nor carries them. A build for another target embeds no OpenTUI library at all:
 * its own import is pointed at an empty file, so `tui` there says it is unavailable.
 */
const embedsOpenTui = target === "linux-x64";
const opentuiExternal = opentuiExternals(target);
const noOpenTui: BunPlugin = {
  name: "no-opentui-native",
  setup(build) {
    const empty = join(root, "build", "native", "opentui-unavailable.js");
    writeFileSync(empty, 'export default "";\n');
    build.onResolve({ filter: /^@opentui\/core-linux-x64$/ }, (args) =>
      args.importer.endsWith(join("src", "native", "opentui.ts")) ? { path: empty } : undefined,
    );
  },
};

/**
 * OpenTUI bundles tree-sitter grammars (about 5 MB of WebAssembly and queries) for its code and
 * markdown views, which `tui` does not use. They are only loaded by path when such a view parses,
 * so each is replaced by one empty file; a view that tried would fail instead of highlighting.
 */
const noTreeSitterAssets: BunPlugin = {
  name: "no-tree-sitter-assets",
  setup(build) {
    const empty = join(root, "build", "native", "opentui-no-asset.bin");
    writeFileSync(empty, "");
    build.onResolve({ filter: /(^|\/)(assets\/[a-z_]+\/[\w.-]+\.(wasm|scm)|tree-sitter\.wasm)$/ }, (args) =>
      args.importer.includes("@opentui") ? { path: empty } : undefined,
    );
  },
};

const result = await Bun.build({
  entrypoints: [join(root, "src", "main.ts")],
  compile:
    targetName === undefined ? { outfile } : { outfile, target: TARGETS[targetName]!.bun as Bun.Build.CompileTarget },
  bytecode: true,
  format: "esm",
  splitting: true,
  minify: true,
  sourcemap: "none",
  target: "bun",
  define: {
    __LSM_BUILD_TARGET__: JSON.stringify(target),
    __LSM_BUILD_DIGEST__: JSON.stringify(buildDigest()),
    ...(versionOverride ? { __LSM_VERSION_OVERRIDE__: JSON.stringify(versionOverride) } : {}),
  },
  external: opentuiExternal,
  plugins: [
    ...(targetName === undefined ? [] : [helperRemap]),
    ...(embedsOpenTui ? [] : [noOpenTui]),
    noTreeSitterAssets,
  ],
});
if (!result.success) {
  for (const m of result.logs) console.error(m);
  process.exit(1);
}
console.error(
  `built ${outfile} for ${target} (native + UI ${Math.round(t1 - t0)} ms, UI ${ui.gzipBytes} B gzipped, ` +
    `compile ${Math.round(performance.now() - t1)} ms)`,
);
