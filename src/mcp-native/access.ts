import { ToolError } from "../core/errors.ts";
import { deniedBy, toWorkspaceRelative } from "../fs/paths.ts";
import type { FilePolicy } from "../fs/resolve.ts";
import type { SessionRecord } from "../sessions/store.ts";
import type { AppServices, Principal } from "../tools/context.ts";

/** What resources, prompts and completions need to know about the caller of one request. */
export interface Caller {
  app: AppServices;
  principal: Principal | undefined;
}

/**
 * The scope a request needs: the same one the tools that show the same data require (read,
 * read_todos, job output are all shell:read). Unauthenticated transports carry no principal.
 */
export function requireScope(caller: Caller, scope: string): void {
  if (caller.principal && !caller.principal.scopes.includes(scope)) {
    throw new ToolError("insufficient_scope", `Missing required OAuth scope: ${scope}`, { scope });
  }
}

/** The session under the tools' ownership rule (session_owner_mismatch for another client's). */
export function ownedSession(caller: Caller, sid: string): SessionRecord {
  const { sessions } = caller.app;
  const rec = sessions.requireFor(sid, caller.principal);
  // A remote session's workdir is a path on its worker: resolving it here would read this machine.
  if (rec.target !== "local") {
    throw new ToolError("remote_session_unsupported", `session ${sid} runs on a remote machine; use the tools for it`, {
      session_id: sid,
    });
  }
  return sessions.touch(rec);
}

/** The local sessions this caller may see, by id; expired, remote and other clients' ones are left out. */
export function ownedSessions(caller: Caller): SessionRecord[] {
  const out: SessionRecord[] = [];
  for (const id of caller.app.sessions.ids()) {
    try {
      const rec = caller.app.sessions.requireFor(id, caller.principal);
      if (rec.target === "local") out.push(rec);
    } catch {
      // Not ours, expired or removed meanwhile: not listed.
    }
  }
  return out;
}

/** The file tools' confinement policy for a session (same fields as tools/files/common.ts). */
export function filePolicy(app: AppServices, session: SessionRecord): FilePolicy {
  return {
    root: app.workspaceRoot,
    workdir: session.workdir,
    stateDir: app.files.stateDir,
    denylist: app.settings.allow_full_control ? [] : app.settings.path_denylist,
  };
}

/** Whether the file tools' path denylist refuses this absolute path (matched as checkCanonical does). */
export function deniedPath(policy: FilePolicy, abs: string): boolean {
  const { denylist } = policy;
  if (denylist.length === 0) return false;
  return (deniedBy(abs, denylist) ?? deniedBy(toWorkspaceRelative(policy.root, abs), denylist)) !== undefined;
}
