import { statSync } from "node:fs";
import { ToolError } from "../../core/errors.ts";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { policyFor } from "./common.ts";

/** What the directory tools (list_files, tree_view, glob_search) share in reading their arguments. */

export const clamp = (n: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, n));

/** A directory argument resolved in the session's workdir (not_a_directory when it is none). */
export function dirArg(ctx: Parameters<typeof policyFor>[0], session: Parameters<typeof policyFor>[1], input: string) {
  const policy = policyFor(ctx, session);
  const res = resolveInWorkdir(policy, input === "" ? "." : input, { mustExist: true });
  if (!statSync(res.real).isDirectory())
    throw new ToolError("not_a_directory", `not a directory: ${input}`, { path: input });
  return { policy, res };
}
