/**
 * The local root: one explicit data directory shared by all sessions. Every model-selected local
 * path is relative to it; our own state directory inside it (spools, partial index) is protected.
 */
import {
  existsSync,
  linkSync,
  lstatSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
} from "node:fs";
import { basename, dirname, join, relative, sep } from "node:path";
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";

/** Name of our protected directory inside the local root. */
export const STATE_DIR_NAME = ".local-shell-mcp-ssh";
/** Suffix of transfer partials (and of the remote upload partials); such names are never model-selectable. */
export const PARTIAL_SUFFIX = ".lsm-partial";
/** Stale spools and partials we created are removed after this long. */
export const SWEEP_AGE_MS = 7 * 24 * 3600 * 1000;

function isWithin(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !rel.startsWith(sep));
}

const partialIndexSchema = z.record(z.string(), z.number());
const remoteIndexSchema = z.record(z.string(), z.record(z.string(), z.number()));

export class LocalRoot {
  readonly stateDir: string;
  readonly spoolDir: string;
  /** Private (0700) home of download partials: their bytes never sit in a directory the model can swap. */
  readonly partialDir: string;
  private readonly indexPath: string;
  private readonly remoteIndexPath: string;

  constructor(readonly root: string) {
    this.stateDir = join(root, STATE_DIR_NAME);
    this.spoolDir = join(this.stateDir, "spool");
    this.partialDir = join(this.stateDir, "partials");
    this.indexPath = join(this.stateDir, "partials.json");
    this.remoteIndexPath = join(this.stateDir, "remote-partials.json");
    ensurePrivateDir(this.stateDir);
    ensurePrivateDir(this.spoolDir);
    ensurePrivateDir(this.partialDir);
  }

  /** Root-relative display form of an absolute path inside the root. */
  display(abs: string): string {
    return relative(this.root, abs) || ".";
  }

  /** Lexical checks shared by sources and destinations; returns the cleaned components. */
  private components(path: string): string[] {
    const bad = () => new ToolError("invalid_local_path", "local path must be a relative path inside the local root");
    if (path === "" || path.includes("\0") || path.startsWith("/")) throw bad();
    const parts = path.split("/").filter((p) => p !== "" && p !== ".");
    if (parts.length === 0 || parts.includes("..")) throw bad();
    // `x/` (or `x/.`) names a directory; dropping the slash would quietly turn it into the file `x`
    if (/\/\.?$/.test(path)) {
      const why = "local path ends with a slash, so it names a directory; give a file name";
      throw new ToolError("invalid_local_path", why);
    }
    if (parts.some((p) => Buffer.byteLength(p) > 255))
      throw new ToolError("invalid_local_path", "a local path component is longer than 255 bytes");
    if (parts[0] === STATE_DIR_NAME)
      throw new ToolError("invalid_local_path", "local path names the server's protected state directory");
    if (parts[parts.length - 1]!.endsWith(PARTIAL_SUFFIX))
      throw new ToolError("invalid_local_path", "local path names a transfer partial");
    return parts;
  }

  /** An existing regular file inside the root (symlinks resolved and re-checked). */
  source(path: string): { abs: string; display: string } {
    const parts = this.components(path);
    let real: string;
    try {
      real = realpathSync(join(this.root, ...parts));
    } catch {
      throw new ToolError("invalid_local_path", "local path does not exist or cannot be resolved");
    }
    if (!isWithin(this.root, real)) throw new ToolError("invalid_local_path", "local path escapes the local root");
    if (isWithin(this.stateDir, real))
      throw new ToolError("invalid_local_path", "local path names the server's protected state directory");
    if (basename(real).endsWith(PARTIAL_SUFFIX))
      throw new ToolError("invalid_local_path", "local path names a transfer partial");
    if (!statSync(real).isFile()) throw new ToolError("invalid_local_path", "local source is not a regular file");
    return { abs: real, display: this.display(real) };
  }

  /**
   * A destination: the parent exists and resolves inside the root, the final name is not a symlink
   * or directory, and an existing file needs `overwrite`.
   */
  destination(path: string, overwrite: boolean): { abs: string; display: string } {
    const parts = this.components(path);
    const name = parts[parts.length - 1]!;
    let parent: string;
    try {
      parent = realpathSync(join(this.root, ...parts.slice(0, -1)));
    } catch {
      throw new ToolError("invalid_local_path", "local destination directory does not exist");
    }
    if (!isWithin(this.root, parent) || !statSync(parent).isDirectory())
      throw new ToolError("invalid_local_path", "local destination escapes the local root");
    if (isWithin(this.stateDir, parent))
      throw new ToolError("invalid_local_path", "local path names the server's protected state directory");
    const abs = join(parent, name);
    let st;
    try {
      st = lstatSync(abs);
    } catch {
      st = undefined;
    }
    if (st?.isSymbolicLink()) throw new ToolError("invalid_local_path", "local destination is a symbolic link");
    if (st?.isDirectory()) throw new ToolError("invalid_local_path", "local destination is a directory");
    if (st && !overwrite) throw new ToolError("local_path_exists", "local destination exists and overwrite is false");
    return { abs, display: this.display(abs) };
  }

  /** The deterministic download partial for `token`, inside the private partial directory. */
  partialFor(token: string): string {
    return join(this.partialDir, `${token}${PARTIAL_SUFFIX}`);
  }

  /**
   * Moves a finished partial to `dest` (from `destination()`), then checks that the destination's
   * parent still resolves to where it was checked: a parent swapped for a symlink in between would
   * have moved the file out of the root, so it is taken back and removed, and the call refused.
   * Without `overwrite` the partial is linked (EEXIST refuses) and then unlinked.
   */
  publish(partial: string, dest: { abs: string }, overwrite: boolean): void {
    const parent = dirname(dest.abs);
    const ino = lstatSync(partial).ino;
    if (overwrite) renameSync(partial, dest.abs);
    else linkSync(partial, dest.abs);
    let moved = false;
    try {
      moved = realpathSync(parent) !== parent;
    } catch {
      moved = true;
    }
    if (moved) {
      try {
        if (lstatSync(dest.abs).ino === ino) rmSync(dest.abs, { force: true });
      } catch {
        // already gone
      }
      rmSync(partial, { force: true });
      throw new ToolError(
        "invalid_local_path",
        "local destination directory changed during publication; the download was discarded",
      );
    }
    if (!overwrite) unlinkSync(partial);
  }

  private readIndex(): Record<string, number> {
    try {
      if (statSync(this.indexPath).size > 4_000_000) return {};
      return partialIndexSchema.parse(JSON.parse(readFileSync(this.indexPath, "utf8")));
    } catch {
      return {};
    }
  }

  /** Remembers a partial we created so a later sweep may remove it if it goes stale. */
  rememberPartial(abs: string): void {
    const index = this.readIndex();
    index[abs] = Date.now();
    writeFileAtomic(this.indexPath, JSON.stringify(index));
  }

  forgetPartial(abs: string): void {
    const index = this.readIndex();
    if (!(abs in index)) return;
    delete index[abs];
    writeFileAtomic(this.indexPath, JSON.stringify(index));
  }

  /**
   * Removes our own stale spool files and recorded partials, and any partial in the private partial
   * directory left by a killed server that is past the sweep age; never touches anything else.
   */
  sweep(now = Date.now()): { spools: number; partials: number } {
    let spools = 0;
    let partials = 0;
    const uid = process.getuid!();
    for (const name of readdirSync(this.spoolDir)) {
      if (!/^[0-9a-f]{32}\.(stdout|stderr)$/.test(name)) continue;
      const p = join(this.spoolDir, name);
      const st = lstatSync(p);
      if (st.isFile() && st.uid === uid && now - st.mtimeMs > SWEEP_AGE_MS) {
        rmSync(p, { force: true });
        spools++;
      }
    }
    for (const name of readdirSync(this.partialDir)) {
      if (!/^[0-9a-f]{32}\.lsm-partial$/.test(name)) continue;
      const p = join(this.partialDir, name);
      const st = lstatSync(p);
      if (st.isFile() && st.uid === uid && now - st.mtimeMs > SWEEP_AGE_MS) {
        rmSync(p, { force: true });
        partials++;
      }
    }
    const index = this.readIndex();
    let changed = false;
    for (const [p, at] of Object.entries(index)) {
      let st;
      try {
        st = lstatSync(p);
      } catch {
        st = undefined;
      }
      const stale = now - Math.max(at, st?.mtimeMs ?? 0) > SWEEP_AGE_MS;
      if (!st || stale) {
        if (st && st.isFile() && st.uid === uid && p.endsWith(PARTIAL_SUFFIX) && isWithin(this.root, p)) {
          rmSync(p, { force: true });
          partials++;
        }
        delete index[p];
        changed = true;
      }
    }
    if (changed) writeFileAtomic(this.indexPath, JSON.stringify(index));
    return { spools, partials };
  }

  private readRemoteIndex(): Record<string, Record<string, number>> {
    try {
      if (statSync(this.remoteIndexPath).size > 4_000_000) return {};
      return remoteIndexSchema.parse(JSON.parse(readFileSync(this.remoteIndexPath, "utf8")));
    } catch {
      return {};
    }
  }

  private writeRemoteIndex(index: Record<string, Record<string, number>>): void {
    for (const [k, v] of Object.entries(index)) if (Object.keys(v).length === 0) delete index[k];
    writeFileAtomic(this.remoteIndexPath, JSON.stringify(index));
  }

  /** Remembers an upload partial we created on a target (keyed like the transfer cache key). */
  rememberRemotePartial(target: string, path: string): void {
    const index = this.readRemoteIndex();
    (index[target] ??= {})[path] = Date.now();
    this.writeRemoteIndex(index);
  }

  forgetRemotePartials(target: string, paths: string[]): void {
    const index = this.readRemoteIndex();
    const entries = index[target];
    if (!entries || !paths.some((p) => p in entries)) return;
    for (const p of paths) delete entries[p];
    this.writeRemoteIndex(index);
  }

  /** Recorded remote partials of a target whose record is older than the sweep age. */
  staleRemotePartials(target: string, now = Date.now()): string[] {
    const entries = this.readRemoteIndex()[target] ?? {};
    return Object.entries(entries)
      .filter(([p, at]) => now - at > SWEEP_AGE_MS && p.endsWith(PARTIAL_SUFFIX))
      .map(([p]) => p);
  }

  exists(abs: string): boolean {
    return existsSync(abs);
  }
}
