import { ToolError } from "../../core/errors.ts";
import type { AgentBridge } from "../../bridge/service.ts";
import type { ToolContext } from "../context.ts";

/** The Agent Bridge of this server process. */
export async function bridgeOf(ctx: ToolContext): Promise<AgentBridge> {
  const bridge = ctx.app.bridge;
  if (!bridge) throw new ToolError("agent_bridge_disabled", "the Agent Bridge is not available in this server");
  return bridge();
}

/** Where project Skills are looked up: the session's workdir, else the workspace root. */
export function projectRoot(ctx: ToolContext, sessionId: string | null): string {
  return sessionId === null ? ctx.app.workspaceRoot : ctx.requireSession(sessionId).workdir;
}
