/**
 * Builds dist/local-shell-mcp: native helpers first (they are embedded), then one compiled executable.
 * Usage: bun scripts/build.ts [--outfile PATH]
 */
import { $ } from "bun";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { buildUi } from "./build-ui.ts";

const root = resolve(import.meta.dir, "..");
const outfile = process.argv.includes("--outfile") ? resolve(process.argv[process.argv.indexOf("--outfile") + 1]!) : join(root, "dist", "local-shell-mcp");
mkdirSync(join(root, "build", "native"), { recursive: true });
mkdirSync(join(root, "dist"), { recursive: true });

const t0 = performance.now();
await $`bash ${join(root, "scripts", "build-native.sh")} ${join(root, "build", "native", "lsm-runner")}`;
// Static tmux for persistent shells (cached by content, so repeated builds only copy it).
await $`bash ${join(root, "native", "tmux", "build.sh")} ${join(root, "build", "native", "tmux")}`;
// The browser UI, which the server bundle embeds (src/ui/assets.macro.ts).
const ui = await buildUi(root);
const t1 = performance.now();

const result = await Bun.build({
  entrypoints: [join(root, "src", "main.ts")],
  compile: { outfile },
  bytecode: true,
  format: "esm",
  minify: true,
  sourcemap: "none",
  target: "bun",
});
if (!result.success) {
  for (const m of result.logs) console.error(m);
  process.exit(1);
}
console.error(`built ${outfile} (native + UI ${Math.round(t1 - t0)} ms, UI ${ui.gzipBytes} B gzipped, compile ${Math.round(performance.now() - t1)} ms)`);
