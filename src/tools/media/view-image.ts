import { closeSync, fstatSync, readSync } from "node:fs";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { assertRegular } from "../../fs/read.ts";
import { openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor } from "../files/common.ts";
import description from "./view-image.md" with { type: "text" };

/** Image type from magic bytes only; undefined for anything else. */
export function sniffImage(b: Uint8Array): string | undefined {
  const at = (i: number, s: string) => [...s].every((c, j) => b[i + j] === c.charCodeAt(0));
  if (b.length >= 8 && b[0] === 0x89 && at(1, "PNG\r\n\x1a\n")) return "image/png";
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return "image/jpeg";
  if (at(0, "GIF87a") || at(0, "GIF89a")) return "image/gif";
  if (b.length >= 12 && at(0, "RIFF") && at(8, "WEBP")) return "image/webp";
  return undefined;
}

export const viewImage = defineTool({
  name: "view_image",
  title: "View image",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ session_id: SessionId, path: z.string().min(1) }),
  output: z.object({
    session_id: z.string(),
    target: z.enum(["local", "remote"]),
    machine: z.string().nullable(),
    path: z.string(),
    mime_type: z.string(),
    bytes: z.number().int(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const res = resolveInWorkdir(policy, input.path, { mustExist: true });
    const fd = openChecked(policy, res.real, input.path);
    let data: Buffer;
    try {
      const st = fstatSync(fd);
      assertRegular(st, input.path);
      const max = ctx.app.settings.max_view_image_bytes;
      if (st.size === 0) throw new ToolError("image_empty", "Image file is empty");
      if (st.size > max) throw new ToolError("image_too_large", `Refusing image of ${st.size} bytes; max is ${max}`);
      data = Buffer.allocUnsafe(st.size + 1);
      let off = 0;
      for (;;) {
        const n = readSync(fd, data, off, data.length - off, off);
        if (n === 0) break;
        off += n;
        if (off > st.size) throw new ToolError("image_changed", "Image changed while it was being read");
      }
      if (off !== st.size) throw new ToolError("image_changed", "Image changed while it was being read");
      data = data.subarray(0, off);
    } finally {
      closeSync(fd);
    }
    const mime = sniffImage(data);
    if (!mime) throw new ToolError("unsupported_image", "Unsupported image format; expected PNG, JPEG, GIF, or WebP");
    ctx.media?.push({ type: "image", data: data.toString("base64"), mimeType: mime });
    return { session_id: session.session_id, target: "local" as const, machine: null, path: res.rel, mime_type: mime, bytes: data.length };
  },
  text: (o) => `${o.path} (${o.mime_type}, ${o.bytes} bytes)`,
});
