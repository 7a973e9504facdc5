/**
 * The worker bundle is the controller's own executable, packed as a deterministic `.tgz` with one
 * member (`local-shell-mcp`). Same executable → same bytes → same digest, so a worker can pin it.
 *
 * Packing streams the running executable through gzip into a private file under
 * `<state_dir>/remote-bundle/<sha256>.tgz`, once per process (the executable does not change while it
 * runs: on Linux /proc/self/exe still names the running inode after an upgrade replaced the file).
 */
import { createReadStream, readdirSync, rmSync, statSync } from "node:fs";
import { open, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { createGzip } from "node:zlib";
import { ToolError } from "../core/errors.ts";
import { BUILD_DIGEST, BUILD_TARGET, VERSION } from "../core/version.ts";
import { ensurePrivateDir } from "../store/atomic.ts";

/** Name of the one member of the archive; the worker's installer expects exactly this. */
export const BUNDLE_MEMBER = "local-shell-mcp";
/** Largest bundle the controller serves and a worker accepts. */
export const MAX_BUNDLE_BYTES = 256 * 1024 * 1024;
export const BUNDLE_PATH = "/remote/worker-bundle.tgz";

export interface BundleManifest {
  schema_version: 1;
  bundle_version: string;
  sha256: string;
  size: number;
  url: string;
  platform: string;
}

export interface Bundle {
  manifest: BundleManifest;
  /** The private file holding the archive bytes. */
  path: string;
}

/** The platform a manifest names: this build's release target (linux-x64, linux-arm64-musl, darwin-arm64…). */
export const BUNDLE_PLATFORM = BUILD_TARGET;

/** One ustar header block for a regular file: uid/gid 0, no owner names, mtime 0, the given mode. */
export function tarHeader(name: string, size: number, mode: number): Buffer {
  if (Buffer.byteLength(name) > 100) throw new Error("tar member name too long");
  const h = Buffer.alloc(512, 0);
  const field = (offset: number, length: number, value: string) => h.write(value, offset, length, "ascii");
  const octal = (offset: number, length: number, value: number) =>
    field(offset, length, `${value.toString(8).padStart(length - 1, "0")}\0`);
  field(0, 100, name);
  octal(100, 8, mode);
  octal(108, 8, 0);
  octal(116, 8, 0);
  octal(124, 12, size);
  octal(136, 12, 0);
  field(148, 8, "        ");
  field(156, 1, "0");
  field(257, 6, "ustar\0");
  field(263, 2, "00");
  let sum = 0;
  for (const byte of h) sum += byte;
  field(148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return h;
}

/** The executable this process runs from, or a refusal when it runs from sources under `bun`. */
export function ownExecutable(): string {
  if (BUILD_DIGEST === "unbuilt") {
    throw new ToolError(
      "worker_bundle_unavailable",
      "the controller runs from sources; only a compiled build can serve itself as the worker bundle",
    );
  }
  return process.platform === "linux" ? "/proc/self/exe" : process.execPath;
}

/**
 * Streams `source` into `<dir>/<sha256>.tgz` (0600): tar header, the bytes, padding and the two end
 * blocks, gzip-compressed with mtime 0 and no file name (node's zlib header carries neither).
 */
export async function packBundle(source: string, dir: string): Promise<{ sha256: string; size: number; path: string }> {
  ensurePrivateDir(dir);
  const st = statSync(source);
  if (!st.isFile())
    throw new ToolError("worker_bundle_unavailable", "the controller's executable is not a regular file");
  const tmp = join(dir, `.bundle-${process.pid}-${Date.now()}.tmp`);
  const out = await open(tmp, "wx", 0o600);
  const hash = new Bun.CryptoHasher("sha256");
  let size = 0;
  const gzip = createGzip({ level: 6 });
  try {
    const written = (async () => {
      for await (const chunk of gzip as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_BUNDLE_BYTES)
          throw new ToolError("worker_bundle_too_large", "the worker bundle would exceed 256 MiB");
        hash.update(chunk);
        await out.write(chunk);
      }
    })();
    // A failing consumer (size cap, disk) must not leave the producer waiting for a drain forever.
    written.catch(() => gzip.destroy());
    const feed = async (data: Buffer) => {
      if (!gzip.write(data)) await Promise.race([new Promise<void>((resolve) => gzip.once("drain", resolve)), written]);
    };
    await feed(tarHeader(BUNDLE_MEMBER, st.size, 0o755));
    let copied = 0;
    for await (const chunk of createReadStream(source) as AsyncIterable<Buffer>) {
      copied += chunk.length;
      await feed(chunk);
    }
    // The executable must not have changed size under us: the header promised st.size bytes.
    if (copied !== st.size)
      throw new ToolError("worker_bundle_unavailable", "the controller's executable changed while it was packed");
    await feed(Buffer.alloc(((512 - (copied % 512)) % 512) + 1024, 0));
    gzip.end();
    await written;
    await out.sync();
    await out.close();
    const sha256 = hash.digest("hex");
    const path = join(dir, `${sha256}.tgz`);
    await rename(tmp, path);
    return { sha256, size, path };
  } catch (e) {
    gzip.destroy();
    await out.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw e;
  }
}

const caches = new Map<string, BundleCache>();

/** The one cache of a directory in this process (the bundle routes and the channel's update offers share it). */
export function bundleCache(dir: string): BundleCache {
  let cache = caches.get(dir);
  if (!cache) caches.set(dir, (cache = new BundleCache(dir)));
  return cache;
}

/** Builds the bundle once per process; later calls share the same promise (a failure is retried). */
export class BundleCache {
  private pending: Promise<Bundle> | undefined;

  constructor(private readonly dir: string) {}

  current(): Promise<Bundle> {
    if (!this.pending) {
      this.pending = this.build().catch((e) => {
        this.pending = undefined;
        throw e;
      });
    }
    return this.pending;
  }

  private async build(): Promise<Bundle> {
    const packed = await packBundle(ownExecutable(), this.dir);
    // Older archives (another build's digest) are never served again.
    for (const name of readdirSync(this.dir)) {
      if (name !== `${packed.sha256}.tgz`) rmSync(join(this.dir, name), { force: true });
    }
    return {
      path: packed.path,
      manifest: {
        schema_version: 1,
        bundle_version: VERSION,
        sha256: packed.sha256,
        size: packed.size,
        url: `${BUNDLE_PATH}?sha256=${packed.sha256}`,
        platform: BUNDLE_PLATFORM,
      },
    };
  }
}
