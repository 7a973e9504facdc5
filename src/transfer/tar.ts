import { readSync, writeSync } from "node:fs";
import { ToolError } from "../core/errors.ts";

/**
 * The small subset of POSIX tar (ustar with pax `path`/`size` records) that directory transfers
 * use: regular files and directories only. Written and parsed here so every member can be checked
 * before anything is extracted.
 */

export const BLOCK = 512;

export interface TarMember {
  name: string;
  type: "file" | "dir";
  mode: number;
  size: number;
  /** Byte offset of the member's data in the archive. */
  dataOffset: number;
}

function octal(n: number, width: number): string {
  return `${n.toString(8).padStart(width - 1, "0")}\0`;
}

function header(name: string, typeflag: string, mode: number, size: number): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, "utf8");
  h.write(octal(mode & 0o7777, 8), 100, "ascii");
  h.write(octal(0, 8), 108, "ascii");
  h.write(octal(0, 8), 116, "ascii");
  h.write(octal(size, 12), 124, "ascii");
  h.write(octal(0, 12), 136, "ascii");
  h.write("        ", 148, "ascii");
  h.write(typeflag, 156, "ascii");
  h.write("ustar\0", 257, "ascii");
  h.write("00", 263, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
  return h;
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

/** Sequential writer to an open file descriptor. */
export class TarWriter {
  bytes = 0;
  constructor(private readonly fd: number) {}

  private put(buf: Uint8Array): void {
    let off = 0;
    while (off < buf.length) off += writeSync(this.fd, buf, off, buf.length - off);
    this.bytes += buf.length;
  }

  /** A member header (plus a pax header when the name does not fit ustar's 100 bytes). */
  entry(name: string, type: "file" | "dir", mode: number, size: number): void {
    const shown = type === "dir" ? `${name}/` : name;
    if (Buffer.byteLength(shown) > 99) {
      const pax = Buffer.from(paxRecord("path", shown));
      this.put(header("PaxHeader", "x", 0o644, pax.length));
      this.data(pax);
      this.pad(pax.length);
    }
    this.put(header(Buffer.from(shown).subarray(0, 99).toString("latin1"), type === "dir" ? "5" : "0", mode, type === "dir" ? 0 : size));
  }

  data(buf: Uint8Array): void {
    this.put(buf);
  }

  pad(size: number): void {
    const rest = size % BLOCK;
    if (rest) this.put(Buffer.alloc(BLOCK - rest));
  }

  end(): void {
    this.put(Buffer.alloc(BLOCK * 2));
  }
}

function field(h: Buffer, start: number, len: number): string {
  const raw = h.subarray(start, start + len);
  const nul = raw.indexOf(0);
  return raw.subarray(0, nul < 0 ? len : nul).toString("utf8");
}

function parseOctal(h: Buffer, start: number, len: number, what: string): number {
  const s = field(h, start, len).trim();
  if (!/^[0-7]*$/.test(s)) throw new ToolError("archive_invalid", `archive member has a malformed ${what}`);
  return s === "" ? 0 : Number.parseInt(s, 8);
}

function parsePax(body: string): Record<string, string> {
  const out: Record<string, string> = {};
  let at = 0;
  while (at < body.length) {
    const sp = body.indexOf(" ", at);
    const len = Number.parseInt(body.slice(at, sp), 10);
    if (!(len > 0) || sp < 0) throw new ToolError("archive_invalid", "archive has a malformed pax header");
    const rec = body.slice(sp + 1, at + len - 1);
    const eq = rec.indexOf("=");
    if (eq > 0) out[rec.slice(0, eq)] = rec.slice(eq + 1);
    at += len;
  }
  return out;
}

function readExact(fd: number, buf: Buffer, pos: number): boolean {
  let got = 0;
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, pos + got);
    if (n <= 0) return got === 0 ? false : fail("archive ends inside a header");
    got += n;
  }
  return true;
}

function fail(msg: string): never {
  throw new ToolError("archive_invalid", msg);
}

/**
 * Lists the members of an uncompressed archive of `size` bytes, refusing every member type a
 * directory transfer never writes (links, devices, fifos, sparse and GNU extensions).
 */
export function listMembers(fd: number, size: number): TarMember[] {
  const out: TarMember[] = [];
  const h = Buffer.alloc(BLOCK);
  let pos = 0;
  let pax: Record<string, string> = {};
  while (pos + BLOCK <= size) {
    if (!readExact(fd, h, pos)) break;
    if (h.every((b) => b === 0)) return out;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
    if (sum !== parseOctal(h, 148, 8, "checksum")) fail("archive header checksum mismatch");
    const type = String.fromCharCode(h[156]!);
    const declared = parseOctal(h, 124, 12, "size");
    const dataOffset = pos + BLOCK;
    const next = dataOffset + Math.ceil(declared / BLOCK) * BLOCK;
    if (next > size) fail("archive member extends past the end of the archive");
    if (type === "x") {
      const body = Buffer.alloc(declared);
      readExact(fd, body, dataOffset);
      pax = parsePax(body.toString("utf8"));
      pos = next;
      continue;
    }
    if (type !== "0" && type !== "\0" && type !== "5") {
      const what = type === "1" ? "hard link" : type === "2" ? "symbolic link" : type === "3" || type === "4" ? "device" : type === "6" ? "fifo" : type === "S" ? "sparse file" : `type '${type}'`;
      fail(`archive member is a ${what}, which directory transfers refuse`);
    }
    const prefix = field(h, 345, 155);
    const name = pax.path ?? (prefix ? `${prefix}/${field(h, 0, 100)}` : field(h, 0, 100));
    const memberSize = pax.size !== undefined ? Number(pax.size) : declared;
    if (pax.size !== undefined && memberSize !== declared) fail("archive member declares two sizes");
    out.push({ name, type: type === "5" ? "dir" : "file", mode: parseOctal(h, 100, 8, "mode"), size: type === "5" ? 0 : memberSize, dataOffset });
    pax = {};
    pos = next;
  }
  fail("archive has no end marker");
}
