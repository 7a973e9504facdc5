/**
 * Fetches the controller's current worker bundle and installs it (`worker update`, and the channel's
 * automatic update). Every request stays on the controller's origin, redirects included; the
 * manifest is read to at most 256 KiB, the bundle to exactly its announced size, and the bytes must
 * hash to the announced digest before src/worker/install.ts touches them.
 */
import { closeSync, constants, openSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import { BUILD_TARGET, VERSION } from "../core/version.ts";
import { BUNDLE_PATH, MAX_BUNDLE_BYTES, type BundleManifest } from "../remote/bundle.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import { SHA256_PATTERN, workerPaths } from "./layout.ts";
import {
  checkVersionText,
  installedRuntime,
  installFromFile,
  isDowngrade,
  runtimeBinary,
  type InstallResult,
} from "./install.ts";

const MAX_MANIFEST_BYTES = 256 * 1024;
const MAX_REDIRECTS = 5;
const MANIFEST_TIMEOUT_MS = 60_000;
const BUNDLE_TIMEOUT_MS = 600_000;

const refuse = (message: string) => new ToolError("worker_update_refused", message);

function originOf(url: URL): string {
  return url.origin;
}

/** GET `path` on `server`'s origin, following only redirects that stay on that origin. */
export async function sameOriginGet(server: string, path: string, timeoutMs: number): Promise<Response> {
  const base = new URL(server);
  if (base.protocol !== "https:" && base.protocol !== "http:") throw refuse("the controller URL is not http(s)");
  let url = new URL(path, base);
  const signal = AbortSignal.timeout(timeoutMs);
  for (let hop = 0; ; hop++) {
    if (originOf(url) !== originOf(base)) throw refuse("the controller redirected to another origin");
    const res = await fetch(url, {
      redirect: "manual",
      signal,
      headers: { "cache-control": "no-cache", pragma: "no-cache", "user-agent": `local-shell-mcp-worker/${VERSION}` },
    }).catch(() => {
      throw new ToolError("worker_update_unreachable", "the controller could not be reached");
    });
    if (res.status < 300 || res.status >= 400) return res;
    const location = res.headers.get("location");
    await res.body?.cancel();
    if (!location || hop >= MAX_REDIRECTS) throw refuse("the controller answered with a redirect loop or no location");
    url = new URL(location, url);
  }
}

/** Reads at most `max` bytes of a body; more is an error. */
async function readBounded(res: Response, max: number, sink: (chunk: Uint8Array) => void): Promise<number> {
  const declared = Number(res.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > max) throw refuse("the controller's answer is larger than allowed");
  let total = 0;
  const reader = res.body?.getReader();
  if (!reader) return 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return total;
    total += value.length;
    if (total > max) {
      await reader.cancel();
      throw refuse("the controller's answer is larger than allowed");
    }
    sink(value);
  }
}

/** Checks a manifest: schema, digest, version, size cap, platform, and a digest-qualified same-origin url. */
export function validateManifest(raw: unknown, server: string): BundleManifest {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw refuse("the bundle manifest is not an object");
  const m = raw as Record<string, unknown>;
  if (m.schema_version !== 1) throw refuse("the bundle manifest has an unknown schema_version");
  if (typeof m.sha256 !== "string" || !SHA256_PATTERN.test(m.sha256))
    throw refuse("the bundle manifest's sha256 is not 64 hex characters");
  if (typeof m.bundle_version !== "string") throw refuse("the bundle manifest has no version");
  checkVersionText(m.bundle_version);
  if (typeof m.size !== "number" || !Number.isSafeInteger(m.size) || m.size <= 0 || m.size > MAX_BUNDLE_BYTES)
    throw refuse("the bundle manifest's size is not within 1 byte..256 MiB");
  if (typeof m.platform !== "string" || m.platform !== BUILD_TARGET)
    throw refuse(`the controller's bundle is for ${String(m.platform)}, this worker is ${BUILD_TARGET}`);
  if (typeof m.url !== "string") throw refuse("the bundle manifest has no url");
  const base = new URL(server);
  const url = new URL(m.url, base);
  if (url.origin !== base.origin) throw refuse("the bundle url points to another origin");
  if (url.pathname !== BUNDLE_PATH || url.search !== `?sha256=${m.sha256}`)
    throw refuse("the bundle url does not name the manifest's digest");
  return {
    schema_version: 1,
    bundle_version: m.bundle_version,
    sha256: m.sha256,
    size: m.size,
    url: m.url,
    platform: m.platform,
  };
}

export async function fetchManifest(server: string): Promise<BundleManifest> {
  const res = await sameOriginGet(server, `${BUNDLE_PATH}?manifest=1`, MANIFEST_TIMEOUT_MS);
  if (res.status !== 200) {
    await res.body?.cancel();
    throw new ToolError("worker_update_unreachable", `the controller answered ${res.status} for the bundle manifest`);
  }
  const chunks: Uint8Array[] = [];
  await readBounded(res, MAX_MANIFEST_BYTES, (c) => chunks.push(c));
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw refuse("the bundle manifest is not JSON");
  }
  return validateManifest(parsed, server);
}

export interface InstallRuntimeOptions {
  root: string;
  /** The controller origin recorded in the profile. */
  server: string;
  /** Version of the runtime the worker runs now (downgrade check). */
  currentVersion: string;
  force?: boolean;
  /** When the channel announced a digest, the manifest must name exactly it. */
  expectedSha256?: string;
}

/** Fetches, verifies and installs the controller's current runtime. */
export async function installRuntime(opts: InstallRuntimeOptions): Promise<InstallResult> {
  const manifest = await fetchManifest(opts.server);
  if (opts.expectedSha256 && manifest.sha256 !== opts.expectedSha256)
    throw refuse("the controller's bundle changed during the update; try again");
  if (!opts.force && isDowngrade(opts.currentVersion, manifest.bundle_version)) {
    throw new ToolError(
      "worker_runtime_downgrade",
      `refusing worker runtime downgrade from ${opts.currentVersion} to ${manifest.bundle_version} (use --force)`,
    );
  }
  if (!opts.force && installedRuntime(opts.root, manifest.sha256)) {
    return {
      updated: false,
      sha256: manifest.sha256,
      version: manifest.bundle_version,
      binary: runtimeBinary(opts.root, manifest.sha256),
    };
  }
  const runtimes = workerPaths(opts.root).runtimes;
  ensurePrivateDir(opts.root);
  ensurePrivateDir(runtimes);
  const archive = join(runtimes, `.download-${manifest.sha256.slice(0, 16)}-${randomHex(6)}.tgz`);
  const fd = openSync(archive, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    const hash = new Bun.CryptoHasher("sha256");
    let size: number;
    try {
      const res = await sameOriginGet(opts.server, manifest.url, BUNDLE_TIMEOUT_MS);
      if (res.status !== 200) {
        await res.body?.cancel();
        throw new ToolError("worker_update_unreachable", `the controller answered ${res.status} for the bundle`);
      }
      size = await readBounded(res, manifest.size, (chunk) => {
        hash.update(chunk);
        let off = 0;
        while (off < chunk.length) off += writeSync(fd, chunk, off, chunk.length - off);
      });
    } finally {
      closeSync(fd);
    }
    if (size !== manifest.size) throw refuse("the worker bundle has the wrong size");
    if (hash.digest("hex") !== manifest.sha256)
      throw new ToolError(
        "worker_bundle_mismatch",
        "the worker bundle's SHA-256 does not match the manifest; refusing it",
      );
    return await installFromFile({
      root: opts.root,
      archive,
      sha256: manifest.sha256,
      version: manifest.bundle_version,
      force: opts.force,
    });
  } finally {
    rmSync(archive, { force: true });
  }
}
