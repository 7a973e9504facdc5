import { opendirSync } from "node:fs";
import { join } from "node:path";
import { checkCanonical, resolveInWorkdir } from "../fs/resolve.ts";
import { type Caller, deniedPath, filePolicy, ownedSession, ownedSessions, requireScope } from "./access.ts";
import type { RunTool } from "./prompts.ts";

/** Values one completion answers with at most (the MCP limit). */
export const MAX_COMPLETIONS = 100;
/** Directory entries looked at for one path completion. */
const MAX_SCANNED = 10_000;

export interface Completion {
  values: string[];
  total: number;
  hasMore: boolean;
}

function bounded(all: string[], prefix: string): Completion {
  const hits = all.filter((v) => v.startsWith(prefix)).sort();
  return { values: hits.slice(0, MAX_COMPLETIONS), total: hits.length, hasMore: hits.length > MAX_COMPLETIONS };
}

const NONE: Completion = { values: [], total: 0, hasMore: false };

/**
 * completion/complete for an argument of a prompt or a resource template, by the argument's name
 * (the same names the tools use). Values that need a session (shells, jobs, paths) take it from
 * the arguments already given; what the caller may not see completes to nothing, never an error,
 * so completion cannot be used to probe other clients' sessions.
 */
export async function complete(
  caller: Caller,
  name: string,
  value: string,
  given: Record<string, string> | undefined,
  runTool: RunTool,
  toolNames: () => string[],
): Promise<Completion> {
  requireScope(caller, "shell:read");
  if (value.length > 4096) return NONE;
  try {
    switch (name) {
      case "session_id":
        return bounded(
          ownedSessions(caller).map((s) => s.session_id),
          value,
        );
      case "job_id": {
        const sid = sessionOf(caller, given);
        return sid
          ? bounded(
              caller.app.jobs
                .readRows()
                .filter((r) => r.session_id === sid)
                .map((r) => r.job_id),
              value,
            )
          : NONE;
      }
      case "shell_id": {
        const sid = sessionOf(caller, given);
        return sid
          ? bounded(
              (await caller.app.shells.list(sid)).map((s) => s.shell_id),
              value,
            )
          : NONE;
      }
      case "path":
        return completePath(caller, given, value);
      case "machine":
        return bounded(
          (caller.app.remote?.store.workers() ?? [])
            .map((w) => w.name)
            .filter((n): n is string => typeof n === "string"),
          value,
        );
      case "server":
        return bounded(await bridgeServers(caller), value);
      case "tool":
        // The tools this connection lists: ours and those the Agent Bridge forwards.
        return bounded(toolNames(), value);
      case "name":
      case "skill":
        return bounded(await skillNames(runTool), value);
      default:
        return NONE;
    }
  } catch {
    // Not ours, expired, a path outside the workdir, a bridge without manifest: nothing to offer.
    return NONE;
  }
}

function sessionOf(caller: Caller, given: Record<string, string> | undefined): string | undefined {
  const sid = given?.session_id;
  if (!sid) return undefined;
  return ownedSession(caller, sid).session_id;
}

/** Entries of the folder the value points into, relative to the workdir, folders with a slash. */
function completePath(caller: Caller, given: Record<string, string> | undefined, value: string): Completion {
  const sid = sessionOf(caller, given);
  if (!sid) return NONE;
  const session = ownedSession(caller, sid);
  const cut = value.lastIndexOf("/");
  const dir = cut < 0 ? "" : value.slice(0, cut + 1);
  const policy = filePolicy(caller.app, session);
  const shown = dir === "" ? "." : dir;
  const res = resolveInWorkdir(policy, shown, { mustExist: true });
  checkCanonical(policy, res.real, shown);
  const out: string[] = [];
  // Read entry by entry: a folder of a million names costs MAX_SCANNED entries, not all of them.
  const handle = opendirSync(res.real);
  try {
    for (let scanned = 0, e = handle.readSync(); e && scanned < MAX_SCANNED; scanned++, e = handle.readSync()) {
      const abs = join(res.real, e.name);
      if (abs === policy.stateDir) continue;
      // Names the file tools refuse are not offered.
      if (deniedPath(policy, abs)) continue;
      out.push(`${dir}${e.name}${e.isDirectory() ? "/" : ""}`);
    }
  } finally {
    handle.closeSync();
  }
  return bounded(out, value);
}

async function bridgeServers(caller: Caller): Promise<string[]> {
  if (!caller.app.settings.agent_bridge_enabled || !caller.app.bridge) return [];
  const bridge = await caller.app.bridge();
  return [...bridge.requireManifest().servers.keys()];
}

async function skillNames(runTool: RunTool): Promise<string[]> {
  const out = await runTool("list_agent_skills", { session_id: null });
  return (out.skills as Array<{ name: string }>).map((s) => s.name);
}
