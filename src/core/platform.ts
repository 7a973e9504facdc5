/**
 * Platforms the server runs on. Windows is not shipped: its containment and persistent shells
 * (ConPTY) are not built, so `serve` refuses there instead of running commands unbounded.
 */
export function unsupportedPlatform(platform: string = process.platform): string | null {
  if (platform === "win32") {
    return (
      "local-shell-mcp does not support Windows: bounded command containment and persistent shells (ConPTY) " +
      "are not available there, so the server will not start. Use Linux or macOS (or WSL)."
    );
  }
  return null;
}
