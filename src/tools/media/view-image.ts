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

/** Longest edge models look at; larger images are scaled down to it before they are sent. */
export const MAX_IMAGE_EDGE = 1568;
/** Decoding a larger canvas is refused before any pixel memory is allocated (about 400 MB RGBA). */
const MAX_DECODE_PIXELS = 100_000_000;

interface Prepared {
  data: Uint8Array;
  mime: string;
  width: number | null;
  height: number | null;
  original_width: number | null;
  original_height: number | null;
  resized: boolean;
  note: string | null;
}

/**
 * Scales an image whose long edge exceeds MAX_IMAGE_EDGE down to it (aspect kept, Lanczos-3) with
 * Bun's built-in codecs (libjpeg-turbo, libspng, libwebp), re-encoded in its own format (JPEG and
 * WebP at quality 90; GIF, which Bun cannot encode, becomes a PNG of its first frame). Images within the edge are sent
 * byte for byte. An image whose header cannot be decoded is sent as it is, with a note.
 */
async function prepare(data: Uint8Array, mime: string): Promise<Prepared> {
  let width: number;
  let height: number;
  try {
    const meta = await new Bun.Image(data, { maxPixels: MAX_DECODE_PIXELS, autoOrient: false }).metadata();
    width = meta.width;
    height = meta.height;
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "ERR_IMAGE_TOO_MANY_PIXELS")
      throw new ToolError("image_too_large", `Refusing to decode an image of more than ${MAX_DECODE_PIXELS} pixels`);
    return {
      data,
      mime,
      width: null,
      height: null,
      original_width: null,
      original_height: null,
      resized: false,
      note: "image dimensions could not be read; sent unchanged",
    };
  }
  const same = {
    data,
    mime,
    width,
    height,
    original_width: width,
    original_height: height,
    resized: false,
    note: null,
  };
  if (Math.max(width, height) <= MAX_IMAGE_EDGE) return same;
  try {
    let img = new Bun.Image(data, { maxPixels: MAX_DECODE_PIXELS }).resize(MAX_IMAGE_EDGE, MAX_IMAGE_EDGE, {
      fit: "inside",
      withoutEnlargement: true,
      filter: "lanczos3",
    });
    let outMime = mime;
    if (mime === "image/jpeg") img = img.jpeg({ quality: 90 });
    else if (mime === "image/webp") img = img.webp({ quality: 90 });
    else {
      img = img.png();
      outMime = "image/png";
    }
    const out = await img.bytes();
    const sentAs = outMime !== mime ? `; sent as ${outMime}` : "";
    const scaled = `${img.width}x${img.height}`;
    return {
      data: out,
      mime: outMime,
      width: img.width,
      height: img.height,
      original_width: width,
      original_height: height,
      resized: true,
      note: `scaled down from ${width}x${height} to ${scaled} (long edge ${MAX_IMAGE_EDGE} px)${sentAs}`,
    };
  } catch {
    return { ...same, note: `the image could not be scaled down from ${width}x${height}; sent unchanged` };
  }
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
    width: z.number().int().nullable(),
    height: z.number().int().nullable(),
    original_bytes: z.number().int(),
    original_width: z.number().int().nullable(),
    original_height: z.number().int().nullable(),
    resized: z.boolean(),
    note: z.string().nullable(),
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
      if (st.size > max)
        throw new ToolError(
          "image_too_large",
          `Refusing image of ${st.size} bytes; max is ${max} (max_view_image_bytes)`,
        );
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
    if (!mime) throw new ToolError("image_unsupported", "Unsupported image format; expected PNG, JPEG, GIF, or WebP");
    const p = await prepare(data, mime);
    ctx.media?.push({
      type: "image",
      data: Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength).toString("base64"),
      mimeType: p.mime,
    });
    return {
      session_id: session.session_id,
      target: "local" as const,
      machine: null,
      path: res.rel,
      mime_type: p.mime,
      bytes: p.data.byteLength,
      width: p.width,
      height: p.height,
      original_bytes: data.length,
      original_width: p.original_width,
      original_height: p.original_height,
      resized: p.resized,
      note: p.note,
    };
  },
  text: (o) => {
    const size = o.width !== null ? `, ${o.width}x${o.height}` : "";
    return `${o.path} (${o.mime_type}, ${o.bytes} bytes${size})${o.note ? `; ${o.note}` : ""}`;
  },
});
