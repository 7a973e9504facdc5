/**
 * Builds the browser Human UI (Preact + xterm, TSX compiled by Bun itself) into build/ui/assets.json:
 * hashed file names, each file gzipped and base64-encoded. The server bundle embeds that file through
 * a macro (src/ui/assets.macro.ts), so the executable serves the UI with no CDN and nothing to extract.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { gzipSync } from "node:zlib";

export async function buildUi(root: string): Promise<{ files: number; gzipBytes: number }> {
  const result = await Bun.build({
    entrypoints: [join(root, "src", "ui", "web", "main.tsx")],
    target: "browser",
    format: "esm",
    // The terminal view (xterm) is a chunk of its own, fetched when a terminal is first opened.
    splitting: true,
    minify: true,
    sourcemap: "none",
    naming: { entry: "app-[hash].[ext]", asset: "[name]-[hash].[ext]", chunk: "chunk-[hash].[ext]" },
    define: { "process.env.NODE_ENV": '"production"' },
  });
  if (!result.success) throw new Error(`UI build failed:\n${result.logs.map(String).join("\n")}`);
  const assets = [];
  let gzipBytes = 0;
  for (const out of result.outputs) {
    const bytes = new Uint8Array(await out.arrayBuffer());
    const name = out.path.replace(/^.*[\\/]/, "");
    const type = name.endsWith(".js")
      ? "text/javascript; charset=utf-8"
      : name.endsWith(".css")
        ? "text/css; charset=utf-8"
        : out.type;
    const gz = gzipSync(bytes, { level: 9 });
    gzipBytes += gz.byteLength;
    assets.push({ name, type, gzip: Buffer.from(gz).toString("base64"), bytes: bytes.byteLength });
  }
  assets.sort((a, b) => a.name.localeCompare(b.name));
  mkdirSync(join(root, "build", "ui"), { recursive: true });
  writeFileSync(join(root, "build", "ui", "assets.json"), JSON.stringify(assets));
  return { files: assets.length, gzipBytes };
}

if (import.meta.main) {
  const r = await buildUi(resolve(import.meta.dir, ".."));
  console.error(`built UI: ${r.files} files, ${r.gzipBytes} bytes gzipped`);
}
