/**
 * The stable launcher `<root>/run <profile_id>` (bash, 0700). Services and humans start a worker
 * through it; it holds no secret, URL or name. It derives the state root from its own location,
 * reads the profile's runtime digest from profile.json, checks that runtime is installed, and execs
 * that runtime's `worker run <profile_id>`, which reads the identity inside the worker process.
 *
 * Under launchd (the plist sets LOCAL_SHELL_MCP_WORKER_SERVICE_KIND=launchd) it stays the parent
 * instead: launchd has no RestartPreventExitStatus, so the plist restarts only an unsuccessful exit
 * (KeepAlive SuccessfulExit=false) and the launcher reports a revoked worker (78) as a success,
 * and any other end, a clean one included (an update's handover), as a failure to restart.
 */
import { readFileSync } from "node:fs";
import { writeFileAtomic } from "../store/atomic.ts";
import { EXIT_REVOKED, workerPaths } from "./layout.ts";

export const LAUNCHER_SCRIPT = `#!/usr/bin/env bash
# local-shell-mcp worker launcher: run <profile_id>. Generated; rewritten by installs and updates.
set -euo pipefail
root=$(cd "$(dirname "\${BASH_SOURCE[0]}")" && pwd -P)
id=\${1:-}
if [ $# -ne 1 ] || ! [[ $id =~ ^p_[A-Za-z0-9_-]{8,64}$ ]]; then
  echo "usage: $root/run <profile_id>" >&2
  exit 2
fi
profile="$root/profiles/$id/profile.json"
[ -f "$profile" ] || { echo "local-shell-mcp worker: no profile $id under $root" >&2; exit 1; }
digest=$(grep -oE '"runtime_sha256": *"[0-9a-f]{64}"' "$profile" | grep -oE '[0-9a-f]{64}' || true)
[ "$(printf '%s\\n' "$digest" | grep -c .)" = 1 ] ||
  { echo "local-shell-mcp worker: profile $id names no runtime" >&2; exit 1; }
bin="$root/runtimes/$digest/local-shell-mcp"
if [ ! -f "$root/runtimes/$digest/runtime.json" ] || [ ! -x "$bin" ]; then
  echo "local-shell-mcp worker: the runtime of profile $id is not installed; run the join command again" >&2
  exit 1
fi
export LOCAL_SHELL_MCP_WORKER_STATE_DIR="$root"
[ "\${LOCAL_SHELL_MCP_WORKER_SERVICE_KIND:-}" = launchd ] || exec "$bin" worker run "$id"
"$bin" worker run "$id" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' TERM INT HUP
status=0
while :; do
  wait "$child" && status=0 || status=$?
  kill -0 "$child" 2>/dev/null || break
done
if [ "$status" = ${EXIT_REVOKED} ]; then
  echo "local-shell-mcp worker: profile $id was revoked; launchd will not start it again" >&2
  exit 0
fi
[ "$status" != 0 ] || status=1
exit "$status"
`;

/** Writes `<root>/run` (0700) when it is missing or differs; returns its path. */
export function ensureLauncher(root: string): string {
  const path = workerPaths(root).launcher;
  let current: string | undefined;
  try {
    current = readFileSync(path, "utf8");
  } catch {
    current = undefined;
  }
  if (current !== LAUNCHER_SCRIPT) writeFileAtomic(path, LAUNCHER_SCRIPT, 0o700);
  return path;
}
