import { buildEnvironment, gitInfo, instructionFiles } from "../../sessions/orientation.ts";
import type { SessionRecord } from "../../sessions/store.ts";
import type { AppServices } from "../context.ts";
import type { SessionOrientation } from "./orientation-schema.ts";

/** Builds the orientation answer for a session; git, instruction files and probes run concurrently. */
export async function orient(app: AppServices, rec: SessionRecord, message: string): Promise<SessionOrientation> {
  const [git, environment] = await Promise.all([
    gitInfo(app.settings.git_bin, rec.workdir, app.workspaceRoot).catch(() => ({
      is_repo: false,
      root: null,
      branch: null,
      dirty: null,
    })),
    buildEnvironment({
      settings: app.settings,
      workdir: rec.workdir,
      capabilities: app.capabilities,
      probes: app.probes,
    }),
  ]);
  return {
    session_id: rec.session_id,
    target: rec.target,
    workdir: rec.workdir,
    machine: rec.machine,
    created_at: rec.created_at,
    updated_at: rec.updated_at,
    expires_at: rec.expires_at,
    label: rec.label,
    workspace_root: app.workspaceRoot,
    git,
    instruction_files: instructionFiles(rec.workdir, app.workspaceRoot),
    environment,
    message,
  };
}

export function dirPolicy(app: AppServices) {
  return {
    workspaceRoot: app.workspaceRoot,
    stateDir: app.settings.state_dir,
    fullControl: app.settings.allow_full_control,
    pathDenylist: app.settings.path_denylist,
  };
}
