import { type UiAsset, uiAssets } from "./assets.macro.ts" with { type: "macro" };

/** The browser app as the bundler built it; this module loads only when a UI page is served. */
const ASSETS: UiAsset[] = uiAssets();

export interface ServedAsset {
  type: string;
  gzip: Uint8Array<ArrayBuffer>;
  bytes: number;
}

const byName = new Map<string, ServedAsset>(
  ASSETS.map((a) => [a.name, { type: a.type, gzip: Uint8Array.from(Buffer.from(a.gzip, "base64")), bytes: a.bytes }]),
);

export function asset(name: string): ServedAsset | undefined {
  return byName.get(name);
}

/** The names the index page links: the app's script and its stylesheet. */
export const ENTRY_SCRIPT = ASSETS.find((a) => a.name.startsWith("app-") && a.name.endsWith(".js"))?.name ?? "";
export const ENTRY_STYLES = ASSETS.filter((a) => a.name.endsWith(".css")).map((a) => a.name);
