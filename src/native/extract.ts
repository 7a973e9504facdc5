import { chmodSync, lstatSync, readFileSync, renameSync, rmSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { BUILD_DIGEST, VERSION } from "../core/version.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { holdHelperFolder, pruneOtherBuilds } from "./helper-folders.ts";

/**
 * Where embedded helpers are extracted: owner-private, one folder per build. The folder carries the
 * build digest beside the version because two different builds of one version (a developer's tree
 * and an installed release, say) would otherwise keep replacing each other's copies, and a server
 * could start the other build's runner, whose command-line contract may differ. Folders of other
 * builds are removed once nothing uses them (helper-folders.ts).
 */
export function helperDir(env: Record<string, string | undefined> = process.env): string {
  const base = env.XDG_CACHE_HOME && isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : join(homedir(), ".cache");
  return join(base, "local-shell-mcp", "helpers", `${VERSION}-${BUILD_DIGEST.slice(0, 16)}`);
}

function sha256(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}

function matches(path: string, digest: string): boolean {
  try {
    const st = lstatSync(path);
    if (!st.isFile() || (st.mode & 0o022) !== 0 || (typeof process.getuid === "function" && st.uid !== process.getuid())) return false;
    return sha256(readFileSync(path)) === digest;
  } catch {
    return false;
  }
}

const ready = new Map<string, Promise<string>>();

/** Prunes other builds' folders this long after the first extraction, off the start-up path. */
const PRUNE_DELAY_MS = 2000;
let buildFolderInUse: Promise<boolean> | undefined;

/**
 * Marks this build's helper folder as in use for the life of the process before anything in it is
 * used, and then, once, clears out the folders of other builds that nothing uses any more.
 */
function useBuildFolder(buildDir: string): Promise<boolean> {
  buildFolderInUse ??= holdHelperFolder(buildDir).then((held) => {
    setTimeout(() => pruneOtherBuilds(buildDir), PRUNE_DELAY_MS).unref();
    return held;
  });
  return buildFolderInUse;
}

/**
 * Returns the path of an executable copy of an embedded helper. The copy lives in an owner-private
 * versioned folder; it is (re)written atomically under a cross-process lock whenever it is missing
 * or its SHA-256 differs from the embedded bytes.
 */
export function extractHelper(name: string, embeddedPath: string, dir = helperDir()): Promise<string> {
  const key = `${dir}\0${name}`;
  let p = ready.get(key);
  if (!p) {
    p = doExtract(name, embeddedPath, dir);
    p.catch(() => ready.delete(key));
    ready.set(key, p);
  }
  return p;
}

async function doExtract(name: string, embeddedPath: string, dir: string): Promise<string> {
  const bytes = new Uint8Array(await Bun.file(embeddedPath).arrayBuffer());
  if (bytes.length === 0) throw new ToolError("helper_unavailable", `embedded helper ${name} is empty`);
  const digest = sha256(bytes);
  const target = join(dir, name);
  const buildDir = helperDir();
  if (dir === buildDir || dir.startsWith(`${buildDir}/`)) await useBuildFolder(buildDir);
  // The folder is checked (ours, a real directory, 0700) before a copy in it is trusted: a copy
  // whose digest matched is only as safe as the directory that others could rename it in.
  ensurePrivateDir(dir);
  if (matches(target, digest)) return target;
  return withFileLock(join(dir, `.${name}.lock`), () => {
    if (matches(target, digest)) return target;
    const staged = `${target}.new-${process.pid}`;
    rmSync(staged, { force: true });
    writeFileAtomic(staged, bytes, 0o700);
    chmodSync(staged, 0o700);
    if (!matches(staged, digest)) {
      rmSync(staged, { force: true });
      throw new ToolError("helper_unavailable", `extracted helper ${name} failed its SHA-256 check`);
    }
    renameSync(staged, target);
    return target;
  });
}

