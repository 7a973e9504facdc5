import { chmodSync, existsSync, lstatSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, relative, sep } from "node:path";
import { ToolError } from "../core/errors.ts";
import { BUILD_DIGEST, VERSION } from "../core/version.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { holdHelperFolder, pruneOtherBuilds } from "./helper-folders.ts";

/** The cache roots helpers may live under, preferred first: $XDG_CACHE_HOME, then ~/.cache. */
function cacheRoots(env: Record<string, string | undefined>): string[] {
  const home = join(homedir(), ".cache");
  const xdg = env.XDG_CACHE_HOME;
  return xdg && isAbsolute(xdg) && xdg !== home ? [xdg, home] : [home];
}

const buildFolder = () => `${VERSION}-${BUILD_DIGEST.slice(0, 16)}`;

/** Whether `mode` lets the group or others write (a directory anyone else could rename entries in). */
const writableByOthers = (mode: number) => (mode & 0o022) !== 0;
const ownUid = () => (typeof process.getuid === "function" ? process.getuid() : undefined);

/**
 * Why the folders from `root` down to `dir` cannot be trusted, or undefined when they can. Every
 * folder that exists must be a real directory owned by us that nobody else can write: one writable
 * folder anywhere on the way lets another user swap everything below it, which is how a shared
 * XDG_CACHE_HOME let another user's `tmux` run as ours. Folders not there yet are made private later.
 */
export function unsafeChain(root: string, dir: string): string | undefined {
  const rel = relative(root, dir);
  if (rel.startsWith("..") || isAbsolute(rel)) return "the helper folder lies outside its cache root";
  let path = root;
  for (const part of ["", ...(rel ? rel.split(sep) : [])]) {
    path = part ? join(path, part) : path;
    // The root may be a link (a ~/.cache moved to another disk): what it names is checked.
    const st = path === root ? statSync(path, { throwIfNoEntry: false }) : lstatSync(path, { throwIfNoEntry: false });
    if (!st) return undefined;
    if (!st.isDirectory()) return "a helper cache folder is not a directory";
    if (ownUid() !== undefined && st.uid !== ownUid()) return "a helper cache folder is owned by another user";
    // Our own folders below the root are ours to tighten (their files are verified again anyway);
    // the root is the user's, so a loose root is a reason to look elsewhere, not to chmod it.
    if (writableByOthers(st.mode) && path === root) return "the helper cache root is writable by others";
  }
  return undefined;
}

/** Where this build's helpers live (`root`) and the folder itself (`dir`). */
export interface HelperLocation {
  root: string;
  dir: string;
}

/**
 * Where embedded helpers are extracted: owner-private, one folder per build, under the first cache
 * root whose whole chain of folders is ours alone (unsafeChain); when none is, helpers are refused
 * (`helper_unavailable`) rather than run from a place another user controls. The folder carries the
 * build digest beside the version because two different builds of one version (a developer's tree
 * and an installed release, say) would otherwise keep replacing each other's copies, and a server
 * could start the other build's runner, whose command-line contract may differ. Folders of other
 * builds are removed once nothing uses them (helper-folders.ts).
 */
export function helperLocation(env: Record<string, string | undefined> = process.env): HelperLocation {
  const problems: string[] = [];
  for (const root of cacheRoots(env)) {
    const dir = join(root, "local-shell-mcp", "helpers", buildFolder());
    const problem = unsafeChain(root, dir);
    if (!problem) return { root, dir };
    problems.push(problem);
  }
  throw new ToolError("helper_unavailable", `no private folder for embedded helpers: ${problems.join("; ")}`);
}

/** This build's helper folder (see helperLocation). */
export function helperDir(env: Record<string, string | undefined> = process.env): string {
  return helperLocation(env).dir;
}

function sha256(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}

/** A file's identity: any rewrite, rename over it or mode change gives another one (ctime moves). */
function identity(path: string): string | undefined {
  const st = lstatSync(path, { bigint: true, throwIfNoEntry: false });
  if (!st || !st.isFile()) return undefined;
  return `${st.dev}:${st.ino}:${st.size}:${st.mode}:${st.uid}:${st.mtimeNs}:${st.ctimeNs}`;
}

/** Whether `path` is a private file of ours whose SHA-256 is `digest`; returns its identity then. */
function matches(path: string, digest: string): string | undefined {
  try {
    const before = identity(path);
    const st = lstatSync(path);
    if (!before || (st.mode & 0o022) !== 0 || (ownUid() !== undefined && st.uid !== ownUid())) return undefined;
    if (sha256(readFileSync(path)) !== digest) return undefined;
    // Changed while we read it: not what we verified.
    return identity(path) === before ? before : undefined;
  } catch {
    return undefined;
  }
}

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

/** Whether every folder from `root` down to `dir` exists, is ours, and nobody else can write it. */
function chainIntact(root: string, dir: string): boolean {
  const rel = relative(root, dir);
  let path = root;
  for (const part of ["", ...(rel ? rel.split(sep) : [])]) {
    path = part ? join(path, part) : path;
    const st = path === root ? statSync(path, { throwIfNoEntry: false }) : lstatSync(path, { throwIfNoEntry: false });
    if (!st || !st.isDirectory() || writableByOthers(st.mode) || (ownUid() !== undefined && st.uid !== ownUid()))
      return false;
  }
  return true;
}

/** Makes the folders from below `root` down to `dir` (0700) and tightens loosened ones of ours. */
function ensurePrivateChain(root: string, dir: string): void {
  const problem = unsafeChain(root, dir);
  if (problem) throw new ToolError("helper_unavailable", `embedded helpers refused: ${problem}`);
  if (!existsSync(root)) ensurePrivateDir(root);
  let path = root;
  for (const part of relative(root, dir).split(sep).filter(Boolean)) {
    path = join(path, part);
    ensurePrivateDir(path);
  }
  // Checked again after the changes: a folder swapped while we made the chain is caught here.
  if (!chainIntact(root, dir))
    throw new ToolError(
      "helper_unavailable",
      "embedded helpers refused: the helper folder changed while it was prepared",
    );
}

/** What was verified last for one helper: where it lies and the identity its file had then. */
interface Verified {
  root: string;
  dir: string;
  target: string;
  identity: string;
}
const verified = new Map<string, Verified>();
const pending = new Map<string, Promise<string>>();

/**
 * Returns the path of an executable copy of an embedded helper, checked on every call, so callers
 * ask for it right before each exec. The copy lives in an owner-private versioned folder; it is
 * (re)written atomically under a cross-process lock whenever it is missing or its SHA-256 differs
 * from the embedded bytes. Later calls cost a few lstat calls: the folders from the cache root down
 * must still be ours alone and the file must have the identity (inode, size, mode, times) it had
 * when its digest was checked; anything else (a copy replaced or rewritten while the server runs)
 * sends it through the full check again, so a swapped helper is repaired before it is run.
 * `root` is where the chain of checked folders starts (the cache root for helperDir's folders).
 */
export async function extractHelper(name: string, embeddedPath: string, dir?: string, root?: string): Promise<string> {
  const loc = dir ? { dir, root: root ?? dirname(dir) } : helperLocation();
  const key = `${loc.dir}\0${name}`;
  const last = verified.get(key);
  if (last && chainIntact(last.root, last.dir) && identity(last.target) === last.identity) return last.target;
  let p = pending.get(key);
  if (!p) {
    p = doExtract(name, embeddedPath, loc).finally(() => pending.delete(key));
    pending.set(key, p);
  }
  return p;
}

async function doExtract(name: string, embeddedPath: string, loc: HelperLocation): Promise<string> {
  const key = `${loc.dir}\0${name}`;
  verified.delete(key);
  const bytes = new Uint8Array(await Bun.file(embeddedPath).arrayBuffer());
  if (bytes.length === 0) throw new ToolError("helper_unavailable", `embedded helper ${name} is empty`);
  const digest = sha256(bytes);
  const { dir } = loc;
  const target = join(dir, name);
  // The folders are checked (ours, real directories, nobody else can write) before a copy in them is
  // trusted: a copy whose digest matched is only as safe as the directories others could rename in.
  ensurePrivateChain(loc.root, dir);
  const own = helperLocationOrUndefined();
  if (own && (dir === own.dir || dir.startsWith(`${own.dir}/`))) await useBuildFolder(own.dir);
  const remember = (id: string) => {
    verified.set(key, { root: loc.root, dir, target, identity: id });
    return target;
  };
  const ok = matches(target, digest);
  if (ok) return remember(ok);
  return withFileLock(join(dir, `.${name}.lock`), () => {
    const again = matches(target, digest);
    if (again) return remember(again);
    const staged = `${target}.new-${process.pid}`;
    rmSync(staged, { force: true });
    writeFileAtomic(staged, bytes, 0o700);
    chmodSync(staged, 0o700);
    if (!matches(staged, digest)) {
      rmSync(staged, { force: true });
      throw new ToolError("helper_unavailable", `extracted helper ${name} failed its SHA-256 check`);
    }
    renameSync(staged, target);
    // A rename moves the inode's ctime, so the identity is taken from what now sits at the path.
    const placed = matches(target, digest);
    if (!placed) throw new ToolError("helper_unavailable", `extracted helper ${name} changed as it was placed`);
    return remember(placed);
  });
}

function helperLocationOrUndefined(): HelperLocation | undefined {
  try {
    return helperLocation();
  } catch {
    return undefined;
  }
}
