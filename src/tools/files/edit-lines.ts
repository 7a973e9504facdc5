import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { commitChanges } from "../../fs/commit.ts";
import { joinDoc, replaceLines, textToLines } from "../../fs/lines.ts";
import { sha256 } from "../../fs/read.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import {
  blockDiff,
  compactLineEdit,
  contextFor,
  ExpectedSha256,
  LineEditResult,
  loadForEdit,
  policyFor,
} from "./common.ts";
import { checkGrounded, type Grounding, requireSnapshot, withFreshContext } from "./grounding.ts";
import description from "./edit-lines.md" with { type: "text" };
import { EDIT_ANNOTATIONS } from "./hashline-edit.ts";

export const editLines = defineTool({
  name: "edit_lines",
  title: "Replace a line range",
  description,
  scopes: ["shell:read", "shell:write"],
  annotations: EDIT_ANNOTATIONS,
  input: z.object({
    session_id: SessionId,
    path: z.string().min(1),
    start_line: z.number().int(),
    end_line: z.number().int(),
    replacement: z.string(),
    snapshot_id: z.string().max(64).nullable().default(null),
    expected_sha256: ExpectedSha256,
  }),
  output: LineEditResult,
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    if (input.start_line < 1) throw new ToolError("line_out_of_range", "start_line must be >= 1");
    if (input.end_line < input.start_line) throw new ToolError("line_out_of_range", "end_line must be >= start_line");
    const first = loadForEdit(ctx, policy, input.path);
    return ctx.app.files.withPathLocks([first.res.real], () => {
      const loaded = loadForEdit(ctx, policy, first.res.real);
      const g: Grounding = {
        ctx,
        sid: session.session_id,
        rel: loaded.res.rel,
        doc: loaded.doc,
        sha: loaded.sha,
        bytes: loaded.bytes,
      };
      const total = loaded.doc.lines.length;
      if (input.end_line > total)
        throw withFreshContext(
          g,
          "line_out_of_range",
          `end_line ${input.end_line} is beyond file line count ${total}`,
          total,
          total,
        );
      if (input.expected_sha256 && input.expected_sha256 !== loaded.sha) {
        throw withFreshContext(
          g,
          "file_changed",
          "file content does not match expected_sha256; re-read before editing",
          input.start_line,
          input.end_line,
        );
      }
      if (input.snapshot_id)
        checkGrounded(
          g,
          requireSnapshot(g, input.snapshot_id, input.start_line, input.end_line),
          input.start_line,
          input.end_line,
        );
      const plus = textToLines(input.replacement);
      const doc = replaceLines(loaded.doc, input.start_line, input.end_line, plus);
      const bytes = Buffer.from(joinDoc(doc));
      const max = ctx.app.settings.max_file_write_bytes;
      if (bytes.length > max)
        throw new ToolError("file_too_large", `Refusing to write ${bytes.length} bytes; max is ${max}`);
      const unchanged = bytes.equals(loaded.raw);
      if (!unchanged) commitChanges(policy, [{ real: loaded.res.real, shown: input.path, next: bytes, prev: null }]);
      const old = loaded.doc.lines.slice(input.start_line - 1, input.end_line);
      const before = loaded.doc.lines.slice(Math.max(0, input.start_line - 4), input.start_line - 1);
      const after = loaded.doc.lines.slice(input.end_line, input.end_line + 3);
      const context = contextFor(
        ctx,
        session.session_id,
        loaded.res.rel,
        doc,
        sha256(bytes),
        bytes.length,
        input.start_line - 3,
        input.start_line + Math.max(plus.length, 1) + 2,
      );
      return {
        path: loaded.res.rel,
        start_line: input.start_line,
        end_line: input.end_line,
        replacement_line_count: plus.length,
        diff: unchanged ? "" : blockDiff(loaded.res.rel, old, plus, input.start_line, before, after),
        context,
      };
    });
  },
  compact: compactLineEdit,
  text: (o) =>
    o.diff === ""
      ? `no change: the replacement equals the current lines; nothing was written\ncurrent ` +
        `context:\n${o.context.content}`
      : `${o.diff}\nfresh context:\n${o.context.content}`,
});
