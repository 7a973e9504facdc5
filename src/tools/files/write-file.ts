import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { sha256 } from "../../fs/read.ts";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { writeAtomic } from "../../fs/write.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import { ExpectedSha256, loadForEdit, policyFor } from "./common.ts";
import { EDIT_ANNOTATIONS } from "./hashline-edit.ts";
import description from "./write-file.md" with { type: "text" };

export const writeFile = defineTool({
  name: "write_file",
  title: "Write a whole file",
  description,
  scopes: ["shell:read", "shell:write"],
  annotations: EDIT_ANNOTATIONS,
  input: z.object({
    session_id: SessionId,
    path: z.string().min(1),
    content: z.string(),
    overwrite: z.boolean().default(true),
    expected_sha256: ExpectedSha256,
    snapshot_id: z.string().max(64).nullable().default(null),
  }),
  output: z.object({ path: z.string(), bytes: z.number().int(), created: z.boolean(), sha256: z.string().optional() }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const data = Buffer.from(input.content);
    const max = ctx.app.settings.max_file_write_bytes;
    if (data.length > max)
      throw new ToolError("file_too_large", `Refusing to write ${data.length} bytes; max is ${max}`);
    const res = resolveInWorkdir(policy, input.path);
    return ctx.app.files.withPathLocks([res.real], () => {
      if (input.expected_sha256 || input.snapshot_id) {
        const cur = loadForEdit(ctx, policy, res.real);
        if (input.expected_sha256 && cur.sha !== input.expected_sha256) {
          throw new ToolError(
            "file_changed",
            "file content does not match expected_sha256; re-read before overwriting",
            { path: res.rel, file_sha256: cur.sha },
          );
        }
        if (input.snapshot_id) {
          const snap = ctx.app.files.snapshots.get(session.session_id, input.snapshot_id);
          if (!snap || snap.path !== cur.res.rel)
            throw new ToolError(
              "snapshot_not_found",
              "snapshot_id not found for this file in this session; re-read the file",
            );
          if (snap.sha !== cur.sha)
            throw new ToolError("snapshot_stale", "file changed since snapshot; re-read before overwriting", {
              path: res.rel,
            });
        }
      }
      const r = writeAtomic(policy, res.real, input.path, data, { overwrite: input.overwrite, createParents: true });
      return { path: res.rel, bytes: r.bytes, created: r.created, sha256: sha256(data) };
    });
  },
  text: (o) => `${o.created ? "created" : "wrote"} ${o.path} (${o.bytes} bytes, sha256 ${o.sha256})`,
});
