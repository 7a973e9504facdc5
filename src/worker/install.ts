/**
 * Installs a worker runtime (the controller's executable, packed by src/remote/bundle.ts) under
 * `<root>/runtimes/<sha256>/`. Used by the join script (through the verified binary's own
 * `worker install-runtime`), by `worker update`, and by the channel's automatic update.
 *
 * Order, fail closed: verify size and SHA-256 → take install.lock → unpack the one expected member
 * into a private `<sha256>.install.<rand>` → smoke-run `--version` → switch atomically (the old copy
 * is kept as `<sha256>.previous`) → write runtime.json (0600). Any failure restores the previous copy.
 */
import {
  chmodSync,
  closeSync,
  constants,
  createReadStream,
  existsSync,
  lstatSync,
  openSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import { createGunzip } from "node:zlib";
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import { BUNDLE_MEMBER, MAX_BUNDLE_BYTES } from "../remote/bundle.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { FileLock } from "../store/lock.ts";
import { runtimeDir, SHA256_PATTERN, workerPaths } from "./layout.ts";
import { ensureLauncher } from "./launcher.ts";

/** Largest unpacked executable accepted (the archive itself is capped at 256 MiB). */
const MAX_UNPACKED_BYTES = 1024 * 1024 * 1024;
const INSTALL_LOCK_TIMEOUT_MS = 120_000;
/** Zeros tolerated after the member (padding to a 10 KiB tar record is the most any tar writes). */
const MAX_TRAILER_BYTES = 64 * 1024;

export interface RuntimeRecord {
  schema_version: 1;
  bundle_version: string;
  sha256: string;
  size: number;
  installed_at: string;
}

export interface InstallResult {
  updated: boolean;
  sha256: string;
  version: string;
  binary: string;
}

const fail = (message: string) => new ToolError("worker_runtime_invalid", message);

export function checkVersionText(version: string): string {
  if (version.length < 1 || version.length > 128 || /[^\x21-\x7e]/.test(version))
    throw fail("the runtime version must be 1-128 printable characters");
  return version;
}

export function runtimeBinary(root: string, sha256: string): string {
  return join(runtimeDir(root, sha256), BUNDLE_MEMBER);
}

/** The runtime record when `runtimes/<sha256>` is complete: valid runtime.json and an executable binary. */
export function installedRuntime(root: string, sha256: string): RuntimeRecord | null {
  const dir = runtimeDir(root, sha256);
  try {
    const raw = JSON.parse(readFileSync(join(dir, "runtime.json"), "utf8")) as Partial<RuntimeRecord>;
    if (
      raw.schema_version !== 1 ||
      raw.sha256 !== sha256 ||
      typeof raw.bundle_version !== "string" ||
      typeof raw.size !== "number"
    )
      return null;
    const bin = lstatSync(join(dir, BUNDLE_MEMBER));
    if (!bin.isFile() || (bin.mode & 0o100) === 0) return null;
    return raw as RuntimeRecord;
  } catch {
    return null;
  }
}

/**
 * The installed runtime this process executes from, or null (a binary outside `runtimes/`, an
 * incomplete install, a copy elsewhere): a worker reports a runtime digest only when the running
 * executable really is `<root>/runtimes/<sha256>/local-shell-mcp` with a valid runtime.json.
 */
export function executingRuntime(root: string, executable: string = process.execPath): RuntimeRecord | null {
  try {
    const exe = realpathSync(executable);
    const digest = basename(dirname(exe));
    if (!SHA256_PATTERN.test(digest)) return null;
    if (realpathSync(runtimeBinary(root, digest)) !== exe) return null;
    return installedRuntime(root, digest);
  } catch {
    return null;
  }
}

/** `[major, minor, patch]` of a version, or null when it does not start with three numbers. */
export function versionTuple(version: string): [number, number, number] | null {
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : null;
}

/** Whether `target` is numerically older than `current` (unparseable versions never count as older). */
export function isDowngrade(current: string, target: string): boolean {
  const a = versionTuple(current);
  const b = versionTuple(target);
  if (!a || !b) return false;
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return b[i]! < a[i]!;
  return false;
}

async function fileSha256(path: string): Promise<{ sha256: string; size: number }> {
  const hash = new Bun.CryptoHasher("sha256");
  let size = 0;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    size += chunk.length;
    hash.update(chunk);
  }
  return { sha256: hash.digest("hex"), size };
}

/**
 * Unpacks the one regular-file member `local-shell-mcp` into `dir` (created 0700, file 0700). Anything
 * else in the archive (another member, a link, a device, a pax header, a bad checksum) is refused.
 */
export async function unpackBundle(archive: string, dir: string): Promise<string> {
  const target = join(dir, BUNDLE_MEMBER);
  const fd = openSync(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o700);
  let header: Buffer | null = null;
  let pending: Buffer = Buffer.alloc(0);
  let remaining = -1;
  let trailer = 0;
  try {
    for await (const chunk of createReadStream(archive).pipe(createGunzip()) as AsyncIterable<Buffer>) {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      if (header === null) {
        if (pending.length < 512) continue;
        header = pending.subarray(0, 512);
        pending = pending.subarray(512);
        remaining = parseHeader(header);
      }
      const take = Math.min(remaining, pending.length);
      let off = 0;
      while (off < take) off += writeSync(fd, pending, off, take - off);
      remaining -= take;
      pending = pending.subarray(take);
      // After the data only zeros may follow: block padding, the end blocks, tar's record padding.
      if (pending.some((b) => b !== 0)) throw fail("the worker bundle must hold exactly one file");
      trailer += pending.length;
      pending = Buffer.alloc(0);
      if (trailer > MAX_TRAILER_BYTES) throw fail("the worker bundle has data after its end");
    }
  } finally {
    closeSync(fd);
  }
  if (header === null || remaining !== 0 || trailer < 1024) throw fail("the worker bundle is truncated");
  chmodSync(target, 0o700);
  return target;
}

function parseHeader(h: Buffer): number {
  const text = (offset: number, length: number) =>
    h
      .subarray(offset, offset + length)
      .toString("latin1")
      .replace(/\0.*$/s, "");
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
  if (Number.parseInt(text(148, 8).trim(), 8) !== sum) throw fail("the worker bundle's tar header is corrupt");
  if (text(0, 100) !== BUNDLE_MEMBER || text(345, 155) !== "")
    throw fail("the worker bundle must hold exactly one file named local-shell-mcp");
  const type = text(156, 1);
  if (type !== "0" && type !== "") throw fail("the worker bundle's member is not a regular file");
  const size = Number.parseInt(text(124, 12).trim(), 8);
  if (!Number.isSafeInteger(size) || size <= 0 || size > MAX_UNPACKED_BYTES)
    throw fail("the worker bundle's member has an unacceptable size");
  return size;
}

/** Runs `<bin> --version`; the binary must answer with our product line within 30 s. */
export function smokeRun(bin: string): string {
  const r = Bun.spawnSync([bin, "--version"], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "ignore",
    timeout: 30_000,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
  });
  const out = r.stdout.toString().trim();
  if (r.exitCode !== 0 || !out.startsWith("local-shell-mcp "))
    throw new ToolError("worker_runtime_broken", "the new worker runtime did not start (its --version failed)");
  return out;
}

export interface InstallFromFile {
  root: string;
  /** A downloaded `.tgz`; it is checked here again, whoever checked it before. */
  archive: string;
  sha256: string;
  version: string;
  /** Re-install even when that digest is already complete. */
  force?: boolean;
}

/** Installs a verified local archive as `runtimes/<sha256>` (see the file comment for the steps). */
export async function installFromFile(opts: InstallFromFile): Promise<InstallResult> {
  if (!SHA256_PATTERN.test(opts.sha256)) throw fail("a runtime digest is 64 lowercase hex characters");
  checkVersionText(opts.version);
  const actual = await fileSha256(opts.archive);
  if (actual.size <= 0 || actual.size > MAX_BUNDLE_BYTES)
    throw fail("the worker bundle is empty or larger than 256 MiB");
  if (actual.sha256 !== opts.sha256)
    throw new ToolError("worker_bundle_mismatch", "the worker bundle's SHA-256 does not match; refusing to install it");
  const paths = workerPaths(opts.root);
  ensurePrivateDir(paths.root);
  ensurePrivateDir(paths.runtimes);
  const lock = await FileLock.acquire(paths.installLock, INSTALL_LOCK_TIMEOUT_MS);
  try {
    const dest = runtimeDir(opts.root, opts.sha256);
    const result = { sha256: opts.sha256, version: opts.version, binary: join(dest, BUNDLE_MEMBER) };
    if (!opts.force && installedRuntime(opts.root, opts.sha256)) {
      ensureLauncher(opts.root);
      return { updated: false, ...result };
    }
    const staging = `${dest}.install.${randomHex(6)}`;
    const previous = `${dest}.previous`;
    ensurePrivateDir(staging);
    let moved = false;
    try {
      smokeRun(await unpackBundle(opts.archive, staging));
      const record: RuntimeRecord = {
        schema_version: 1,
        bundle_version: opts.version,
        sha256: opts.sha256,
        size: actual.size,
        installed_at: new Date().toISOString(),
      };
      writeFileAtomic(join(staging, "runtime.json"), `${JSON.stringify(record, null, 2)}\n`);
      rmSync(previous, { recursive: true, force: true });
      if (existsSync(dest)) {
        renameSync(dest, previous);
        moved = true;
      }
      renameSync(staging, dest);
      ensureLauncher(opts.root);
      return { updated: true, ...result };
    } catch (e) {
      rmSync(staging, { recursive: true, force: true });
      if (moved && !existsSync(dest)) renameSync(previous, dest);
      throw e;
    }
  } finally {
    lock.release();
  }
}
