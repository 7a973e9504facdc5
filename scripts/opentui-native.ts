/**
 * OpenTUI's per-platform native packages (the `tui` command's renderer). Only the build target's
 * own one may be bundled (scripts/build.ts embeds the linux-x64 library); every other one is
 * external, so neither the build nor the licence list needs packages that are not installed.
 */
export const OPENTUI_NATIVE_PACKAGES = [
  "darwin-x64",
  "darwin-arm64",
  "linux-x64",
  "linux-arm64",
  "win32-x64",
  "win32-arm64",
  "linux-x64-musl",
  "linux-arm64-musl",
].map((p) => `@opentui/core-${p}`);

/** The externals for a build whose target is `target` (e.g. "linux-x64"). */
export function opentuiExternals(target: string): string[] {
  return OPENTUI_NATIVE_PACKAGES.filter((p) => p !== `@opentui/core-${target}` || target !== "linux-x64");
}
