/**
 * The npm packages bundled into the executable and their licence texts. The list comes from the
 * bundler itself (its metafile of inputs), so a dependency that is installed but never bundled is
 * not listed and one that is bundled cannot be missed.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { buildUi } from "../scripts/build-ui.ts";
import { opentuiExternals } from "../scripts/opentui-native.ts";

/** [file name in licenses/npm/, text] sorted by name. */
export async function npmLicences(root: string): Promise<[string, string][]> {
  // The server bundle embeds the built UI through a macro, which needs build/ui/assets.json.
  await buildUi(root);
  // The native helpers are not npm packages (and need not be built yet): leave them out.
  const skipHelpers: import("bun").BunPlugin = {
    name: "skip-helpers",
    setup: (b) => void b.onResolve({ filter: /build\/native\// }, (a) => ({ path: a.path, external: true })),
  };
  const result = await Bun.build({
    entrypoints: [join(root, "src", "main.ts")],
    target: "bun",
    format: "esm",
    metafile: true,
    external: opentuiExternals("linux-x64"),
    plugins: [skipHelpers],
  } as Parameters<typeof Bun.build>[0]);
  // The browser UI is bundled separately (scripts/build-ui.ts) and embedded as data: its packages too.
  const ui = await Bun.build({
    entrypoints: [join(root, "src", "ui", "web", "main.tsx")],
    target: "browser",
    format: "esm",
    metafile: true,
  } as Parameters<typeof Bun.build>[0]);
  if (!result.success || !ui.success) throw new Error("bundling for the licence list failed");
  const inputsOf = (r: unknown) =>
    Object.keys((r as { metafile: { inputs: Record<string, unknown> } }).metafile.inputs);
  const inputs = [...inputsOf(result), ...inputsOf(ui)];
  const dirs = new Set<string>();
  for (const input of inputs) {
    const at = input.lastIndexOf("node_modules/");
    if (at < 0) continue;
    const parts = input.slice(at + "node_modules/".length).split("/");
    const pkgName = parts[0]!.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0]!;
    dirs.add(resolve(root, input.slice(0, at + "node_modules/".length) + pkgName));
  }
  const out = new Map<string, string>();
  for (const dir of dirs) {
    const meta = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
      name: string;
      version: string;
      license?: string;
    };
    const file = existsSync(dir) ? readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f)) : undefined;
    let text = file
      ? readFileSync(join(dir, file), "utf8")
      : `${meta.name} ${meta.version} declares the licence "${meta.license ?? "unknown"}" and ships no licence file.\n`;
    // Packages that bundle third-party code (OpenTUI's native library) ship its licences beside theirs.
    for (const extra of readdirSync(dir)
      .filter((f) => /^licen[cs]e-/i.test(f))
      .sort())
      text += `\n\n---- ${extra} ----\n\n${readFileSync(join(dir, extra), "utf8")}`;
    out.set(
      `${meta.name.replace("/", "__")}@${meta.version}.txt`,
      `${meta.name} ${meta.version} (licence: ${meta.license ?? "see below"})\n\n${text}`,
    );
  }
  return [...out.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}
