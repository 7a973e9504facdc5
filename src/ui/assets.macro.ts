import { readFileSync } from "node:fs";
import { join } from "node:path";

export interface UiAsset {
  /** Served name, with a content hash so a stale copy can never be mixed with a new page. */
  name: string;
  type: string;
  /** gzip of the file, base64: embedded, and sent as-is to browsers that accept gzip. */
  gzip: string;
  bytes: number;
}

/**
 * Bun macro: the browser app as scripts/build-ui.ts built it, inlined into the server bundle. (A
 * macro cannot run Bun.build itself while the bundler waits for it.)
 */
export function uiAssets(): UiAsset[] {
  const file = join(import.meta.dir, "..", "..", "build", "ui", "assets.json");
  try {
    return JSON.parse(readFileSync(file, "utf8")) as UiAsset[];
  } catch {
    throw new Error(`missing ${file}: run scripts/build.ts (it builds the UI before the server)`);
  }
}
