import { type Dirent, existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { isWithin } from "./paths.ts";

/** Folders skipped by discovery tools unless the caller asks for ignored entries. */
export const SKIPPED_DIRS = new Set([
  ".git",
  ".hg",
  ".svn",
  "node_modules",
  "__pycache__",
  ".venv",
  ".mypy_cache",
  ".pytest_cache",
  ".tox",
]);

interface Rule {
  re: RegExp;
  negate: boolean;
  dirOnly: boolean;
}

/** Translates one glob (gitignore flavour) into a regex source over `/`-separated paths. */
export function globToRegex(glob: string): string {
  let out = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "*") {
      if (glob[i + 1] === "*") {
        const atStart = i === 0 || glob[i - 1] === "/";
        const atEnd = i + 2 === glob.length || glob[i + 2] === "/";
        if (atStart && atEnd) {
          if (glob[i + 2] === "/") {
            out += "(?:.*/)?";
            i += 2;
          } else {
            out += ".*";
            i += 1;
          }
          continue;
        }
      }
      out += "[^/]*";
      while (glob[i + 1] === "*") i++;
    } else if (c === "?") out += "[^/]";
    else if (c === "[") {
      const close = glob.indexOf("]", i + 2);
      if (close < 0) out += "\\[";
      else {
        let body = glob.slice(i + 1, close);
        if (body.startsWith("!")) body = `^${body.slice(1)}`;
        out += `[${body.replace(/\\/g, "\\\\")}]`;
        i = close;
      }
    } else if (c === "\\" && i + 1 < glob.length) {
      out += glob[i + 1]!.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
      i++;
    } else out += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  }
  return out;
}

function parseRules(text: string): Rule[] {
  const rules: Rule[] = [];
  for (let line of text.split("\n")) {
    line = line.replace(/\r$/, "");
    if (line === "" || line.startsWith("#")) continue;
    line = line.replace(/(?<!\\)\s+$/, "");
    if (line === "") continue;
    let negate = false;
    if (line.startsWith("!")) {
      negate = true;
      line = line.slice(1);
    } else if (line.startsWith("\\!") || line.startsWith("\\#")) line = line.slice(1);
    let dirOnly = false;
    if (line.endsWith("/")) {
      dirOnly = true;
      line = line.slice(0, -1);
    }
    if (line === "") continue;
    const anchored = line.includes("/");
    if (line.startsWith("/")) line = line.slice(1);
    const body = globToRegex(line);
    const re = new RegExp(`^${anchored ? "" : "(?:.*/)?"}${body}$`);
    rules.push({ re, negate, dirOnly });
  }
  return rules;
}

/**
 * Where .gitignore files stop counting for a walk rooted at `root`: the nearest folder at or above it
 * that holds `.git` (the repository root), or the workspace root, whichever is nearer. Undefined when
 * `root` is not inside `workspaceRoot`.
 */
export function ignoreBoundary(root: string, workspaceRoot: string): string | undefined {
  if (!isWithin(workspaceRoot, root)) return undefined;
  for (let dir = root; ; dir = dirname(dir)) {
    if (dir === workspaceRoot || existsSync(join(dir, ".git"))) return dir;
    if (dirname(dir) === dir) return undefined;
  }
}

interface Layer {
  /** Path of the layer's folder from the walk root ("" = the root itself). */
  base: string;
  /** For a folder above the walk root: the path from that folder down to the root. */
  up: string;
  rules: Rule[];
}

function readRules(dir: string): Rule[] {
  try {
    return parseRules(readFileSync(join(dir, ".gitignore"), "utf8"));
  } catch {
    return [];
  }
}

/** The .gitignore rules in effect for one directory: its own plus those of its ancestors. */
export class IgnoreStack {
  private constructor(private readonly layers: readonly Layer[]) {}

  static empty(): IgnoreStack {
    return new IgnoreStack([]);
  }

  /**
   * The rules of the folders above `root` up to `boundary` (inclusive), outermost first, as git
   * applies them: a deeper .gitignore overrides a shallower one.
   */
  static above(root: string, boundary: string | undefined): IgnoreStack {
    if (!boundary || root === boundary || !isWithin(boundary, root)) return IgnoreStack.empty();
    const layers: Layer[] = [];
    for (let dir = dirname(root); ; dir = dirname(dir)) {
      const rules = readRules(dir);
      if (rules.length) layers.unshift({ base: "", up: relative(dir, root).split(sep).join("/"), rules });
      if (dir === boundary || dirname(dir) === dir) break;
    }
    return new IgnoreStack(layers);
  }

  /** Adds the directory's own .gitignore (if any); `rel` is its path from the walk root. */
  enter(abs: string, rel: string): IgnoreStack {
    const rules = readRules(abs);
    return rules.length ? new IgnoreStack([...this.layers, { base: rel, up: "", rules }]) : this;
  }

  ignored(rel: string, isDir: boolean): boolean {
    let result = false;
    for (const layer of this.layers) {
      let sub =
        layer.base === "" ? rel : rel.startsWith(`${layer.base}/`) ? rel.slice(layer.base.length + 1) : undefined;
      if (sub === undefined) continue;
      if (layer.up) sub = `${layer.up}/${sub}`;
      for (const r of layer.rules) {
        if (r.dirOnly && !isDir) continue;
        if (r.re.test(sub)) result = !r.negate;
      }
    }
    return result;
  }
}

export interface WalkEntry {
  /** Path from the walk root, `/`-separated. */
  rel: string;
  abs: string;
  dirent: Dirent;
  depth: number;
}

export interface WalkOptions {
  gitignore: boolean;
  /** Include names starting with "." (".git" and friends still follow `skipDirs`). */
  hidden: boolean;
  /** Skip SKIPPED_DIRS and .gitignore'd entries; false lists everything. */
  skipIgnored: boolean;
  maxDepth: number;
  /** Never listed nor entered (the private state dir). */
  exclude: string | undefined;
  /**
   * The workspace root: .gitignore files in the folders above the walk root count too, up to the
   * workspace root or the repository root, whichever is nearer (see `ignoreBoundary`).
   */
  workspaceRoot?: string;
  signal?: AbortSignal;
}

const byName = (a: Dirent, b: Dirent) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/**
 * Depth-first walk with entries sorted by name in each directory. Symlinked directories are listed
 * but never entered. `visit` returns false to stop the walk, "skip" to not descend.
 */
export function walk(root: string, opts: WalkOptions, visit: (e: WalkEntry) => boolean | "skip" | void): void {
  const recurse = (abs: string, rel: string, depth: number, ignore: IgnoreStack): boolean => {
    if (opts.signal?.aborted) return false;
    let entries: Dirent[];
    try {
      entries = readdirSync(abs, { withFileTypes: true });
    } catch {
      return true;
    }
    entries.sort(byName);
    const rules = opts.gitignore && opts.skipIgnored ? ignore.enter(abs, rel) : ignore;
    for (const d of entries) {
      const childAbs = join(abs, d.name);
      const childRel = rel ? `${rel}/${d.name}` : d.name;
      if (opts.exclude && isWithin(opts.exclude, childAbs)) continue;
      const isDir = d.isDirectory();
      if (!opts.hidden && d.name.startsWith(".")) continue;
      if (opts.skipIgnored) {
        if (isDir && SKIPPED_DIRS.has(d.name)) continue;
        if (opts.gitignore && rules.ignored(childRel, isDir)) continue;
      }
      const r = visit({ rel: childRel, abs: childAbs, dirent: d, depth });
      if (r === false) return false;
      if (isDir && r !== "skip" && depth + 1 < opts.maxDepth) {
        if (!recurse(childAbs, childRel, depth + 1, rules)) return false;
      }
    }
    return true;
  };
  const start =
    opts.gitignore && opts.skipIgnored && opts.workspaceRoot
      ? IgnoreStack.above(root, ignoreBoundary(root, opts.workspaceRoot))
      : IgnoreStack.empty();
  recurse(root, "", 0, start);
}
