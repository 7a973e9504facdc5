import { fstatSync, lstatSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { log } from "../core/log.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import { FileLock } from "../store/lock.ts";

/**
 * Folders of embedded helpers are per build (`<version>-<digest16>`, extract.ts), so every build
 * leaves one behind. This module lets a process mark its build's folder as in use for its whole
 * lifetime, and removes the folders of other builds once nothing can be using them.
 *
 * In use means any of: a process holds a shared flock on the folder's `.in-use.lock` (every process
 * that extracts from the folder takes one and keeps it until it exits; flocks die with their
 * holder, so a crash cannot leave one behind); a live process runs an executable from the folder or
 * names it on its command line (a tmux server or `lsm-runner --serve` that outlived its server, a
 * job supervisor, or a build from before this lock existed); or anything in it changed within
 * PRUNE_AGE_MS. A pruner takes the exclusive lock without waiting, checks the processes, renames
 * the folder out of its name while still holding the lock, and only then deletes it.
 */

export const IN_USE_LOCK = ".in-use.lock";
/** A folder younger than this is kept whatever the other checks say (a build just extracted, say). */
export const PRUNE_AGE_MS = 24 * 60 * 60 * 1000;
/** The naming scheme of a build's folder: a version, then 16 hex digits of the build digest. */
const BUILD_FOLDER = /^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?-[0-9a-f]{16}$/;
/** A folder renamed for removal by a pruner that did not finish (it was checked before the rename). */
const REMOVAL = /^\.removing-\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?-[0-9a-f]{16}-\d+$/;
const HOLD_ATTEMPTS = 40;

/** Locks this process holds, by folder (one in practice: its own build's). */
const held = new Map<string, FileLock>();

/**
 * Takes a shared lock on `dir`'s in-use file and keeps it for the life of the process (the
 * descriptor is close-on-exec, so children do not inherit it). A pruner may have removed the file
 * between our open and our lock; the lock then sits on a deleted inode and protects nothing, so the
 * file is checked to still be the one at the path, and on a mismatch the folder is made again.
 * Returns whether the lock is held; failures are not errors (the age and process checks still apply).
 */
export async function holdHelperFolder(dir: string): Promise<boolean> {
  if (held.has(dir)) return true;
  for (let i = 0; i < HOLD_ATTEMPTS; i++) {
    try {
      ensurePrivateDir(dir);
      const path = join(dir, IN_USE_LOCK);
      const r = FileLock.attempt(path, "shared");
      if (r.status === "acquired") {
        const mine = fstatSync(r.lock.descriptor!);
        const there = lstatSync(path, { throwIfNoEntry: false });
        if (there && there.ino === mine.ino && there.dev === mine.dev) {
          held.set(dir, r.lock);
          return true;
        }
        r.lock.release();
      }
    } catch (e) {
      // Only a folder renamed away under us is worth another try; an unsafe or unwritable one is not.
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") return false;
    }
    await Bun.sleep(25);
  }
  return false;
}

export interface PruneReport {
  removed: number;
  inUse: number;
  young: number;
  /** Why nothing was looked at (the root is not a private directory of ours), if so. */
  skipped?: string;
}

const ownUid = () => (typeof process.getuid === "function" ? process.getuid() : undefined);

/** Newest modification time of the folder and its direct entries (never following links). */
function newestChange(folder: string): number {
  let newest = lstatSync(folder).mtimeMs;
  for (const name of readdirSync(folder)) {
    const st = lstatSync(join(folder, name), { throwIfNoEntry: false });
    if (st && st.mtimeMs > newest) newest = st.mtimeMs;
  }
  return newest;
}

/**
 * Whether a live process runs an executable from `folder` or names a path inside it on its
 * command line. Where /proc is missing (macOS) this reports false and the lock and age decide.
 */
function processUses(folder: string): boolean {
  const inside = `${folder}/`;
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((n) => /^\d+$/.test(n));
  } catch {
    return false;
  }
  for (const pid of pids) {
    try {
      if (readlinkSync(`/proc/${pid}/exe`).startsWith(inside)) return true;
    } catch {
      // Gone, a kernel thread, or another user's process (which cannot use our private folder).
    }
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "latin1").includes(inside)) return true;
    } catch {
      // Gone meanwhile.
    }
  }
  return false;
}

/** A real directory (not a link) owned by us; lstat never follows the last component. */
function ownDirectory(path: string): boolean {
  const st = lstatSync(path, { throwIfNoEntry: false });
  return (
    st !== undefined && st.isDirectory() && !st.isSymbolicLink() && (ownUid() === undefined || st.uid === ownUid())
  );
}

/**
 * Removes the folders of other builds in `root` that nothing uses (see the module comment). Only
 * entries named by the build scheme are looked at, only real directories owned by us, and only
 * when `root` itself is an owner-private directory of ours. Deletion never follows links: a link
 * inside a folder is removed, not what it points to.
 */
export function pruneHelperFolders(root: string, own: string, now = Date.now()): PruneReport {
  const report: PruneReport = { removed: 0, inUse: 0, young: 0 };
  const st = lstatSync(root, { throwIfNoEntry: false });
  if (!st || !st.isDirectory()) return { ...report, skipped: "no helper root" };
  if ((ownUid() !== undefined && st.uid !== ownUid()) || (st.mode & 0o077) !== 0)
    return { ...report, skipped: "helper root is not private" };
  for (const name of readdirSync(root)) {
    try {
      pruneOne(root, name, own, now, report);
    } catch {
      // Changed or removed while we looked (another pruner, say): leave it to the next start.
    }
  }
  return report;
}

function pruneOne(root: string, name: string, own: string, now: number, report: PruneReport): void {
  const folder = join(root, name);
  if (REMOVAL.test(name) && ownDirectory(folder)) {
    rmSync(folder, { recursive: true, force: true });
    return;
  }
  if (name === own || !BUILD_FOLDER.test(name) || !ownDirectory(folder)) return;
  if (now - newestChange(folder) < PRUNE_AGE_MS) {
    report.young++;
    return;
  }
  const r = FileLock.attempt(join(folder, IN_USE_LOCK), "exclusive");
  if (r.status !== "acquired") {
    if (r.status === "busy") report.inUse++;
    return;
  }
  try {
    if (processUses(folder)) {
      report.inUse++;
      return;
    }
    // Renamed while locked, so a process of that build starting now finds no folder (and makes a
    // fresh one) rather than one being emptied; its wait for the lock ends on a deleted file,
    // which holdHelperFolder notices.
    const doomed = join(root, `.removing-${name}-${process.pid}`);
    renameSync(folder, doomed);
    rmSync(doomed, { recursive: true, force: true });
    report.removed++;
  } finally {
    r.lock.release();
  }
}

/**
 * Prunes the siblings of this build's folder `dir`; never throws, and logs counts only (no paths,
 * which name the user's home).
 */
export function pruneOtherBuilds(dir: string): void {
  try {
    const report = pruneHelperFolders(dirname(dir), basename(dir));
    if (report.skipped) log.debug(`helper folders not pruned: ${report.skipped}`);
    else
      log.info(
        `helper folders of other builds: ${report.removed} removed, ${report.inUse} in use, ${report.young} recent`,
      );
  } catch (e) {
    log.warn(`helper folders not pruned: ${(e as NodeJS.ErrnoException).code ?? "unexpected error"}`);
  }
}
