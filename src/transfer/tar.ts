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
    this.put(
      header(
        Buffer.from(shown).subarray(0, 99).toString("latin1"),
        type === "dir" ? "5" : "0",
        mode,
        type === "dir" ? 0 : size,
      ),
    );
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

function fail(msg: string, code = "archive_invalid"): never {
  throw new ToolError(code, msg);
}

/** Largest pax extended header we read: it holds a path and a size, never more. */
export const MAX_PAX_BYTES = 64 * 1024;
/** Longest member name (PATH_MAX). */
export const MAX_NAME_BYTES = 4096;
/** All member names together: the member list is held in memory until extraction. */
export const MAX_NAME_TOTAL_BYTES = 8 * 1024 * 1024;
/** Bytes tolerated after the end marker (tar pads to a record, 10 KiB by default). */
const MAX_TRAILER_BYTES = 1024 * 1024;

export interface TarLimits {
  maxEntries: number;
  /** Most data bytes all members together may declare. */
  maxUnpackedBytes: number;
}

function typeName(type: string): string {
  if (type === "1") return "hard link";
  if (type === "2") return "symbolic link";
  if (type === "3" || type === "4") return "device";
  if (type === "6") return "fifo";
  if (type === "S") return "sparse file";
  return `type '${type}'`;
}

/**
 * Reads an archive as a stream of chunks and lists its members, refusing every member type a
 * directory transfer never writes (links, devices, fifos, sparse and GNU extensions). Nothing is
 * allocated from a size the archive declares: data is skipped as it arrives, a pax header is
 * collected only up to MAX_PAX_BYTES, and the member count, declared bytes and names are checked
 * against the limits as each header arrives, so a refused archive stops at its first bad header.
 */
export class TarScanner {
  readonly members: TarMember[] = [];
  /** Absolute offset of the next byte fed. */
  private pos = 0;
  private readonly header = Buffer.alloc(BLOCK);
  private headerFill = 0;
  /** Data and padding bytes of the current member still to come. */
  private skip = 0;
  private pax: { body: Buffer; fill: number } | undefined;
  private paxFields: Record<string, string> = {};
  private ended = false;
  private trailer = 0;
  private declared = 0;
  private nameBytes = 0;

  constructor(private readonly limits: TarLimits) {}

  feed(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.ended) {
        this.trailer += chunk.length - at;
        if (this.trailer > MAX_TRAILER_BYTES) fail("archive has data after its end marker");
        this.pos += chunk.length - at;
        return;
      }
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - at);
        if (this.pax && this.pax.fill < this.pax.body.length) {
          const take = Math.min(n, this.pax.body.length - this.pax.fill);
          this.pax.body.set(chunk.subarray(at, at + take), this.pax.fill);
          this.pax.fill += take;
        }
        this.skip -= n;
        at += n;
        this.pos += n;
        if (this.skip === 0 && this.pax) {
          this.paxFields = parsePax(this.pax.body.toString("utf8"));
          this.pax = undefined;
        }
        continue;
      }
      const n = Math.min(BLOCK - this.headerFill, chunk.length - at);
      this.header.set(chunk.subarray(at, at + n), this.headerFill);
      this.headerFill += n;
      at += n;
      this.pos += n;
      if (this.headerFill === BLOCK) {
        this.headerFill = 0;
        this.onHeader(this.pos);
      }
    }
  }

  private onHeader(dataOffset: number): void {
    const h = this.header;
    if (h.every((b) => b === 0)) {
      this.ended = true;
      return;
    }
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
    if (sum !== parseOctal(h, 148, 8, "checksum")) fail("archive header checksum mismatch");
    const type = String.fromCharCode(h[156]!);
    const declared = parseOctal(h, 124, 12, "size");
    if (!Number.isSafeInteger(declared)) fail("archive member has a malformed size");
    const padded = Math.ceil(declared / BLOCK) * BLOCK;
    if (type === "x") {
      if (declared > MAX_PAX_BYTES) fail(`archive has a pax header of ${declared} bytes, above ${MAX_PAX_BYTES}`);
      this.pax = { body: Buffer.alloc(declared), fill: 0 };
      this.skip = padded;
      if (padded === 0) {
        this.pax = undefined;
        this.paxFields = {};
      }
      return;
    }
    if (type !== "0" && type !== "\0" && type !== "5") {
      fail(`archive member is a ${typeName(type)}, which directory transfers refuse`);
    }
    const pax = this.paxFields;
    this.paxFields = {};
    const prefix = field(h, 345, 155);
    const name = pax.path ?? (prefix ? `${prefix}/${field(h, 0, 100)}` : field(h, 0, 100));
    const nameBytes = Buffer.byteLength(name);
    if (nameBytes > MAX_NAME_BYTES) fail(`archive member name is ${nameBytes} bytes, above ${MAX_NAME_BYTES}`);
    this.nameBytes += nameBytes;
    if (this.nameBytes > MAX_NAME_TOTAL_BYTES) {
      fail(`archive member names exceed ${MAX_NAME_TOTAL_BYTES} bytes together`);
    }
    const paxSizeDiffers = pax.size !== undefined && (!/^[0-9]{1,16}$/.test(pax.size) || Number(pax.size) !== declared);
    if (paxSizeDiffers) fail("archive member declares two sizes");
    const size = type === "5" ? 0 : declared;
    if (this.members.length >= this.limits.maxEntries) {
      const max = this.limits.maxEntries;
      fail(`the archive has more than max_transfer_archive_entries (${max}) members`, "transfer_too_many_entries");
    }
    this.declared += size;
    if (this.declared > this.limits.maxUnpackedBytes) {
      const max = this.limits.maxUnpackedBytes;
      fail(`the archive declares more than max_transfer_unpacked_bytes (${max}) bytes`, "transfer_too_large");
    }
    const mode = parseOctal(h, 100, 8, "mode");
    this.members.push({ name, type: type === "5" ? "dir" : "file", mode, size, dataOffset });
    // A directory's declared data is skipped too (ustar allows none; we never write any).
    this.skip = padded;
  }

  /** The members, once the whole archive was fed; refuses an archive cut short. */
  finish(): TarMember[] {
    if (this.ended) return this.members;
    if (this.skip > 0) fail("archive ends inside a member");
    if (this.headerFill > 0) fail("archive ends inside a header");
    fail("archive has no end marker");
  }
}

/** Lists the members of an uncompressed archive of `size` bytes, reading it in bounded pieces. */
export function listMembers(fd: number, size: number, limits: TarLimits): TarMember[] {
  const scanner = new TarScanner(limits);
  const buf = Buffer.allocUnsafe(1 << 20);
  for (let pos = 0; pos < size; ) {
    const n = readSync(fd, buf, 0, Math.min(buf.length, size - pos), pos);
    if (n <= 0) break;
    scanner.feed(buf.subarray(0, n));
    pos += n;
  }
  return scanner.finish();
}
