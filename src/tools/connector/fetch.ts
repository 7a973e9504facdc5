import { closeSync, fstatSync } from "node:fs";
import { z } from "zod";
import { incidentError, isToolError } from "../../core/errors.ts";
import { assertRegular, readLines } from "../../fs/read.ts";
import { openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { docUrl, rootPolicy } from "./documents.ts";
import description from "./fetch.md" with { type: "text" };

export const fetchDocument = defineTool({
  name: "fetch",
  noauthHint: true,
  // The ChatGPT connector pair: ChatGPT reaches a server over HTTP only, so stdio does not list it.
  availableWhen: { modes: ["mcp", "http"] },
  title: "Fetch workspace document",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ id: z.string().max(4200) }),
  output: z.object({
    id: z.string(),
    title: z.string(),
    text: z.string(),
    url: z.string(),
    metadata: z.record(z.string(), z.unknown()).nullable(),
  }),
  async run(ctx, input) {
    const policy = rootPolicy(ctx);
    const id = input.id.replace(/^file:\/\/\/workspace\//, "");
    try {
      const res = resolveInWorkdir(policy, id, { mustExist: true });
      const fd = openChecked(policy, res.real, id);
      try {
        const st = fstatSync(fd);
        assertRegular(st, id);
        const r = readLines(fd, st, [], ctx.app.settings.max_file_read_bytes, ctx.app.files.lineIndex, id);
        return {
          id: res.rel,
          title: res.rel,
          text: r.raw,
          url: docUrl(res.rel),
          metadata: { source: "workspace", bytes: r.size, truncated: r.truncated, total_lines: r.total },
        };
      } finally {
        closeSync(fd);
      }
    } catch (e) {
      const te = isToolError(e) ? e : incidentError(e, "connector fetch", "the document could not be read");
      const { code, message } = te;
      return {
        id: input.id,
        title: input.id,
        text: `Unable to fetch file: ${message}`,
        url: docUrl(input.id),
        metadata: { source: "workspace", error: code },
      };
    }
  },
  text: (o) => o.text,
});
