import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { SessionId } from "../common.ts";
import type { ToolContext } from "../context.ts";

/**
 * What the persistent-shell tools share: the arguments that name the shell a call acts on and its
 * owner session, the owner check, and the hint when the id names a background job instead.
 */

export const ShellId = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, "must be a shell_id returned by bash pty=true");
export const OwnerSession = SessionId.nullable()
  .default(null)
  .describe("The session that started the shell; recommended, and required to act on it strictly as its owner.");
/** The annotations of the tools that type into a shell or end it. */
export const EXECUTE = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: false,
  openWorldHint: true,
} as const;

/**
 * Validates the optional owner session (touching it) and returns its id. Without one, an
 * authenticated (OAuth) caller still acts only through the shell's own session, which must be
 * theirs (`session_owner_mismatch` otherwise); unauthenticated callers keep the compatible form.
 */
export async function owner(ctx: ToolContext, sid: string | null, shellId: string): Promise<string | null> {
  if (sid !== null) return ctx.requireSession(sid).session_id;
  if (!ctx.principal) return null;
  const shell = (await ctx.app.shells.list(null)).find((s) => s.shell_id === shellId);
  // An unknown shell is left to the manager, which answers shell_not_found.
  return shell?.session_id ? ctx.requireSession(shell.session_id).session_id : null;
}

/** shell_not_found, saying so when the id is a background job's (the other kind of handle). */
export async function withShellHint<T>(ctx: ToolContext, id: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof ToolError) || e.code !== "shell_not_found") throw e;
    let isJob = false;
    try {
      isJob = ctx.app.jobs.readRows().some((j) => j.job_id === id);
    } catch {
      // No job registry to consult: the plain error stands.
    }
    if (isJob) {
      throw new ToolError(
        "shell_not_found",
        `${id} is a background job, not a persistent shell: use job poll=["${id}"] (offset, wait_for) or ` +
          `job cancel=["${id}"]`,
        { shell_id: id, job_id: id },
      );
    }
    throw e;
  }
}
