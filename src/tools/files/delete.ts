import { z } from "zod";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { removeEntry } from "../../fs/remove.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import { policyFor } from "./common.ts";
import description from "./delete.md" with { type: "text" };
import { EDIT_ANNOTATIONS } from "./hashline-edit.ts";

export const deleteFileOrDir = defineTool({
  name: "delete_file_or_dir",
  title: "Delete file or directory",
  description,
  scopes: ["shell:read", "shell:write"],
  annotations: EDIT_ANNOTATIONS,
  input: z.object({ session_id: SessionId, path: z.string().min(1), recursive: z.boolean().default(false) }),
  output: z.object({ path: z.string(), deleted: z.enum(["file", "directory", "link"]) }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const res = resolveInWorkdir(policy, input.path, { mustExist: true, followFinal: false });
    const deleted = await ctx.app.files.withPathLocks([res.real], () =>
      removeEntry(policy, res.real, input.path, input.recursive),
    );
    return { path: res.rel, deleted };
  },
  text: (o) => `deleted ${o.deleted} ${o.path}`,
});
