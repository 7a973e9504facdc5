import { z } from "zod";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { clamp, dirArg } from "./directory-args.ts";
import { listDirectory, ListFilesOutput } from "./listing.ts";
import description from "./list-files.md" with { type: "text" };

export const listFiles = defineTool({
  name: "list_files",
  title: "List files",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    path: z.string().default("."),
    recursive: z.boolean().default(false),
    max_entries: z.number().int().default(500),
    include_ignored: z.boolean().default(false),
  }),
  output: ListFilesOutput,
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const { policy, res } = dirArg(ctx, session, input.path);
    const limit = clamp(input.max_entries, 0, ctx.app.settings.max_directory_entries);
    return listDirectory(ctx.app.workspaceRoot, res.real, {
      recursive: input.recursive,
      limit,
      includeIgnored: input.include_ignored,
      exclude: policy.stateDir,
    });
  },
  text: (o) =>
    [
      ...o.entries.map(
        (e) => `${e.type}\t${e.path}${e.type === "dir" ? "/" : ""}${e.type === "file" ? `\t${e.size}` : ""}`,
      ),
      ...(o.is_truncated ? [`[truncated at ${o.limit_count} entries]`] : []),
    ].join("\n"),
});
