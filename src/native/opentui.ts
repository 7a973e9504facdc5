import libopentui from "@opentui/core-linux-x64";
import { join } from "node:path";
import { extractHelper, helperLocation } from "./extract.ts";

/**
 * OpenTUI's native renderer (libopentui.so, Zig) for the `tui` command. The build embeds the
 * linux-x64 library; here it is extracted, like the other helpers, into the owner-private versioned
 * helper folder (cross-process lock, SHA-256 checked), laid out as OpenTUI's asset root expects
 * (`<root>/@opentui/core-linux-x64/libopentui.so`). OTUI_ASSET_ROOT then makes OpenTUI load it from
 * there, so Bun never writes its own copy into the shared $TMPDIR. Only `tui` calls this.
 */
export async function loadOpenTui(): Promise<typeof import("@opentui/core")> {
  if (process.platform !== "linux" || process.arch !== "x64")
    throw new Error(`the embedded terminal UI is built for linux-x64 only; set ui_tui_command to use another`);
  const loc = helperLocation();
  const root = join(loc.dir, "opentui");
  await extractHelper("libopentui.so", libopentui, join(root, "@opentui", "core-linux-x64"), loc.root);
  process.env.OTUI_ASSET_ROOT = root;
  return import("@opentui/core");
}
