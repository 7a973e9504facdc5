/**
 * Archives a hostile worker sends: tar headers written by hand, so a header may declare any size
 * or type, followed by as many real bytes as the test chooses (usually zeros that gzip to nothing).
 */
import { gzipSync } from "node:zlib";
import type { Answer, WireCall } from "./fake-worker.ts";

const BLOCK = 512;

/** One ustar header block with a correct checksum; `size` may be anything up to 8 GiB - 1. */
export function rawHeader(name: string, typeflag: string, size: number, mode = 0o644): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, "utf8");
  h.write(`${mode.toString(8).padStart(7, "0")}\0`, 100, "ascii");
  h.write("0000000\0", 108, "ascii");
  h.write("0000000\0", 116, "ascii");
  h.write(`${size.toString(8).padStart(11, "0")}\0`, 124, "ascii");
  h.write("00000000000\0", 136, "ascii");
  h.write("        ", 148, "ascii");
  h.write(typeflag, 156, "ascii");
  h.write("ustar\0", 257, "ascii");
  h.write("00", 263, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
  return h;
}

/**
 * A gzip holding `header` then `zeros` bytes of zeros (no end marker: the archive claims more
 * than it carries, unless `zeros` covers it). One 16 MiB run of zeros is compressed once and its
 * gzip member repeated (a gzip stream may hold many members): 3 GiB of zeros is a 3 MB file.
 */
export function zeroBomb(header: Buffer, zeros: number): Buffer {
  const PIECE = 16 << 20;
  const full = gzipSync(Buffer.alloc(Math.min(zeros, PIECE)), { level: 9 });
  const parts: Buffer[] = [gzipSync(header)];
  let left = zeros;
  for (; left >= PIECE; left -= PIECE) parts.push(full);
  if (left > 0) parts.push(gzipSync(Buffer.alloc(left), { level: 9 }));
  return Buffer.concat(parts);
}

/** A plain archive of small members with an end marker. */
export function smallTar(members: Array<{ name: string; type?: string; body?: string; size?: number }>): Buffer {
  const parts: Buffer[] = [];
  for (const m of members) {
    const body = Buffer.from(m.body ?? "");
    parts.push(rawHeader(m.name, m.type ?? "0", m.size ?? body.length));
    if (body.length) parts.push(body, Buffer.alloc((BLOCK - (body.length % BLOCK)) % BLOCK));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}

const sha = (b: Uint8Array) => new Bun.CryptoHasher("sha256").update(b).digest("hex");

/**
 * Answers the transfer calls of a directory copy from `w` with `archive` (gzipped bytes) as the
 * packed directory: stat, pack, the archive's stat, chunk reads, delete.
 */
export function serveArchive(archive: Uint8Array): (c: WireCall) => Exclude<Answer, undefined> {
  const digest = sha(archive);
  const name = "remote-transfer-0123456789ab.tar.gz";
  return (c) => {
    const a = c.args as Record<string, unknown>;
    if (c.op === "transfer_stat" && a.temp)
      return {
        ok: true,
        data: {
          path: name,
          resolved_path: name,
          kind: "file",
          size: archive.length,
          mode: 0o600,
          identity: "blob",
          sha256: null,
        },
      };
    if (c.op === "transfer_stat")
      return {
        ok: true,
        data: {
          path: a.path,
          resolved_path: a.path,
          kind: "dir",
          size: 0,
          mode: 0o755,
          identity: "tree",
          sha256: null,
        },
      };
    if (c.op === "transfer_pack_dir")
      return {
        ok: true,
        data: {
          path: a.path,
          archive: { path: name, temp: true },
          bytes: archive.length,
          sha256: digest,
          compression: "gz",
          entries: 1,
        },
      };
    if (c.op === "transfer_read_chunk") {
      const offset = a.offset as number;
      const slice = archive.subarray(offset, Math.min(archive.length, offset + (a.length as number)));
      const data = {
        path: name,
        offset,
        bytes: slice.length,
        size: archive.length,
        eof: offset + slice.length >= archive.length,
        sha256: sha(slice),
        identity: "blob",
      };
      return { ok: true, data, body: slice };
    }
    if (c.op === "transfer_delete_temp_path") return { ok: true, data: { deleted: true } };
    return { ok: false, code: "unknown_operation", message: c.op };
  };
}
