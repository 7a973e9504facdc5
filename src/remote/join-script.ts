/**
 * The bash script served at `GET /join`. A user pipes it into bash on the worker host:
 *
 *   curl -fsSL '<server>/join' | bash -s -- --invite CODE [--name N] [--workdir DIR] [--profile ID] [--background]
 *
 * It downloads the controller's own executable as the worker bundle, verifies size and SHA-256
 * against the manifest before anything from it runs, lets the verified binary install itself under
 * the worker state root (`worker install-runtime`: install.lock, atomic switch, runtime.json,
 * profile.json, the `run` launcher), and starts `worker connect --invite-stdin`. The invite travels
 * on stdin only: never on a command line, neither the worker's nor curl's.
 */
import { BUNDLE_PATH, MAX_BUNDLE_BYTES } from "./bundle.ts";
import BODY from "./join.sh" with { type: "text" };

/** Single-quotes a value for bash (the server URL is the only thing substituted into the script). */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/** The script for a controller reachable at `server` (an http(s) origin without a trailing slash). */
export function joinScript(server: string): string {
  if (!/^https?:\/\/[^\s/?#'\\]+$/.test(server)) throw new Error("the server origin is not a plain http(s) origin");
  return [
    "#!/usr/bin/env bash",
    "# local-shell-mcp worker installer, served by the controller at /join.",
    "set -euo pipefail",
    "umask 077",
    `SERVER=${shellQuote(server)}`,
    `BUNDLE_PATH=${shellQuote(BUNDLE_PATH)}`,
    `MAX_BUNDLE_BYTES=${MAX_BUNDLE_BYTES}`,
    "MANIFEST=",
    BODY,
    'main "$@"',
    "",
  ].join("\n");
}
