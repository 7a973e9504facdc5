import { closeSync, existsSync, openSync, readSync, realpathSync, statSync } from "node:fs";
import { ToolError } from "../core/errors.ts";
import { dirname, join, relative, resolve, sep } from "node:path";
import { isWithin } from "./paths.ts";
import { ignoreBoundary, walk } from "./walk.ts";

export interface RawMatch {
  /** Absolute path of the file. */
  abs: string;
  line: number;
  /** 1-based character column of the first match on the line. */
  column: number;
  text: string;
}

export interface SearchRequest {
  /** The canonical directory searched by default; every root must still resolve inside it. */
  cwd: string;
  pattern: string;
  regex: boolean;
  caseSensitive: boolean;
  gitignore: boolean;
  hidden: boolean;
  /** Files or directories to search (absolute); empty = cwd. */
  roots: string[];
  globs: string[];
  /** Excluded directory (the state dir). */
  exclude: string | undefined;
  /** Stop after this many matches. */
  limit: number;
  rgBin: string;
  /** The workspace root, which bounds the .gitignore files read above `cwd` (see `ignoreBoundary`). */
  workspaceRoot?: string;
  signal: AbortSignal;
  timeoutMs: number;
}

export interface SearchOutcome {
  matches: RawMatch[];
  /** More matches existed beyond `limit`. */
  more: boolean;
  stderr: string;
  ok: boolean;
  engine: "ripgrep" | "builtin";
}

function rgPath(bin: string): string | undefined {
  return Bun.which(bin) ?? undefined;
}

const MAX_STDERR = 20_000;

/** Orders paths as a sorted depth-first walk does: segment by segment. */
export function comparePaths(a: string, b: string): number {
  if (a === b) return 0;
  const x = a.split("/");
  const y = b.split("/");
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i]! < y[i]! ? -1 : 1;
  }
  return x.length - y.length;
}

/** Ignore files above `dir` that ripgrep would read but git (bounded as we bound it) would not. */
function ignoreFilesAbove(dir: string): boolean {
  const repoRoot = existsSync(join(dir, ".git"));
  for (let d = dirname(dir); ; d = dirname(d)) {
    if (existsSync(join(d, ".gitignore")) || existsSync(join(d, ".ignore")) || existsSync(join(d, ".rgignore")))
      return true;
    if (!repoRoot && existsSync(join(d, ".git", "info", "exclude"))) return true;
    if (dirname(d) === d) return false;
  }
}

/**
 * How ripgrep reads exactly the ignore files git would, bounded by the workspace root. Given
 * absolute paths it reads those of every folder above them (stopping .gitignore at a repository
 * root): right when nothing above the boundary adds rules ("parents"). Otherwise, when every root is
 * the boundary itself, `--no-ignore-parent` is exact ("own"); else undefined: the built-in walk,
 * which stops at the boundary, answers.
 */
function rgIgnoreMode(req: SearchRequest): "parents" | "own" | undefined {
  if (!req.gitignore || !req.workspaceRoot) return "parents";
  const boundary = ignoreBoundary(req.cwd, req.workspaceRoot) ?? req.cwd;
  if (!ignoreFilesAbove(boundary)) return "parents";
  return (req.roots.length ? req.roots : [req.cwd]).every((r) => r === boundary) ? "own" : undefined;
}

/**
 * The roots to search (cwd when none), each resolved now, at the point of use, and required to lie
 * inside `cwd` as it was checked: a workdir swapped for a symlink to elsewhere after the session
 * started must not lead either engine outside. Missing roots are kept for the engines to report.
 */
function confinedRoots(req: SearchRequest): string[] {
  return (req.roots.length ? req.roots : [req.cwd]).map((root) => {
    let real: string;
    try {
      real = realpathSync(root);
    } catch {
      return root;
    }
    if (!isWithin(req.cwd, real)) {
      throw new ToolError(
        "path_outside_workdir",
        "the search path resolves outside the session workdir (was the workdir replaced by a symlink?); " +
          "start a new session in a real directory",
      );
    }
    return real;
  });
}

/** Content search: ripgrep when present (JSON output, sorted here), else the built-in walker. */
export async function searchFiles(request: SearchRequest): Promise<SearchOutcome> {
  const req = { ...request, roots: confinedRoots(request) };
  const rg = rgPath(req.rgBin);
  const mode = rg ? rgIgnoreMode(req) : undefined;
  if (rg && mode) {
    // Unsorted (parallel) first; only a result set too large to sort in memory is searched again
    // sorted, which keeps paging stable either way.
    const fast = await ripgrep(rg, req, mode, false);
    if (fast) return fast;
    return (await ripgrep(rg, req, mode, true))!;
  }
  return builtin(req);
}

/** Most matches collected from an unsorted ripgrep run before falling back to a sorted one. */
const UNSORTED_CAP = 20_000;

async function ripgrep(
  rg: string,
  req: SearchRequest,
  mode: "parents" | "own",
  sorted: boolean,
): Promise<SearchOutcome | undefined> {
  const args = [rg, "--json", "--line-number", "--column", "--no-config", "--no-require-git"];
  if (mode === "own") args.push("--no-ignore-parent");
  if (sorted) args.push("--sort", "path");
  if (!req.gitignore) args.push("--no-ignore");
  if (req.hidden) args.push("--hidden", "--glob", "!.git");
  if (!req.regex) args.push("--fixed-strings");
  if (!req.caseSensitive) args.push("--ignore-case");
  for (const g of req.globs) args.push("--glob", g);
  if (req.exclude) {
    const rel = relative(req.cwd, req.exclude);
    if (isWithin(req.cwd, req.exclude))
      args.push("--glob", `!/${rel.split(sep).join("/")}`, "--glob", `!/${rel.split(sep).join("/")}/**`);
  }
  args.push("-e", req.pattern, "--");
  // Absolute roots: ripgrep applies anchored rules of ignore files above a relative root wrongly.
  args.push(...(req.roots.length ? req.roots : [req.cwd]));
  const cap = sorted ? req.limit : Math.max(req.limit, UNSORTED_CAP);
  const proc = Bun.spawn(args, {
    cwd: req.cwd,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
  });
  const kill = () => proc.kill("SIGKILL");
  req.signal.addEventListener("abort", kill, { once: true });
  const timer = setTimeout(kill, req.timeoutMs);
  const matches: RawMatch[] = [];
  let more = false;
  let stopped = false;
  const stderrP = new Response(proc.stderr).text();
  const decoder = new TextDecoder();
  let buf = "";
  try {
    outer: for await (const chunk of proc.stdout) {
      buf += decoder.decode(chunk, { stream: true });
      let nl = buf.indexOf("\n");
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        nl = buf.indexOf("\n");
        if (!line.startsWith('{"type":"match"')) continue;
        const ev = JSON.parse(line) as {
          data: {
            path: { text?: string };
            lines: { text?: string; bytes?: string };
            line_number: number;
            submatches: Array<{ start: number }>;
          };
        };
        const d = ev.data;
        if (d.path.text === undefined) continue;
        if (matches.length >= cap) {
          more = true;
          stopped = true;
          kill();
          break outer;
        }
        const text = (d.lines.text ?? Buffer.from(d.lines.bytes ?? "", "base64").toString("utf8")).replace(
          /\r?\n$/,
          "",
        );
        const startByte = d.submatches[0]?.start ?? 0;
        const column =
          Buffer.from(d.lines.text ?? "")
            .subarray(0, startByte)
            .toString("utf8").length + 1;
        matches.push({ abs: resolve(req.cwd, d.path.text), line: d.line_number, column, text });
      }
    }
  } finally {
    clearTimeout(timer);
    req.signal.removeEventListener("abort", kill);
  }
  const code = await proc.exited;
  const stderr = (await stderrP).slice(0, MAX_STDERR);
  if (!sorted && more) return undefined;
  const timedOut = !stopped && code !== 0 && code !== 1 && code !== 2 && proc.signalCode !== null;
  if (!sorted) {
    matches.sort((a, b) => comparePaths(a.abs, b.abs) || a.line - b.line);
    if (matches.length > req.limit) {
      matches.length = req.limit;
      more = true;
    }
  }
  return {
    matches,
    more,
    stderr: timedOut ? `${stderr}search timed out`.trim() : stderr,
    ok: stopped || code === 0 || code === 1,
    engine: "ripgrep",
  };
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

const BINARY_PROBE = 8192;
const MAX_BUILTIN_FILE = 50_000_000;

function builtin(req: SearchRequest): SearchOutcome {
  let re: RegExp;
  try {
    re = new RegExp(req.regex ? req.pattern : escapeRegex(req.pattern), req.caseSensitive ? "u" : "iu");
  } catch (e) {
    return {
      matches: [],
      more: false,
      stderr: `invalid pattern: ${(e as Error).message}`,
      ok: false,
      engine: "builtin",
    };
  }
  const globRes = req.globs.map((g) => {
    const neg = g.startsWith("!");
    const body = neg ? g.slice(1) : g;
    return { neg, re: new RegExp(`^(?:.*/)?${globSource(body)}$`) };
  });
  const wanted = (rel: string) => {
    const pos = globRes.filter((g) => !g.neg);
    if (pos.length && !pos.some((g) => g.re.test(rel))) return false;
    return !globRes.some((g) => g.neg && g.re.test(rel));
  };
  const matches: RawMatch[] = [];
  let more = false;
  const files: string[] = [];
  for (const root of req.roots.length ? req.roots : [req.cwd]) {
    let st;
    try {
      st = statSync(root);
    } catch {
      continue;
    }
    if (st.isFile()) {
      files.push(root);
      continue;
    }
    walk(
      root,
      {
        gitignore: req.gitignore,
        hidden: req.hidden,
        skipIgnored: req.gitignore,
        maxDepth: 1_000,
        exclude: req.exclude,
        workspaceRoot: req.workspaceRoot,
        signal: req.signal,
      },
      (e) => {
        if (e.dirent.isFile() && wanted(relative(req.cwd, e.abs).split(sep).join("/"))) files.push(e.abs);
        if (!req.gitignore && e.dirent.name === ".git") return "skip";
      },
    );
  }
  const decoder = new TextDecoder("utf-8", { fatal: true });
  for (const abs of files) {
    if (req.signal.aborted) break;
    let bytes: Buffer;
    try {
      const fd = openSync(abs, "r");
      try {
        const size = statSync(abs).size;
        if (size > MAX_BUILTIN_FILE) continue;
        bytes = Buffer.allocUnsafe(size);
        let off = 0;
        while (off < size) {
          const n = readSync(fd, bytes, off, size - off, off);
          if (n === 0) break;
          off += n;
        }
        bytes = bytes.subarray(0, off);
      } finally {
        closeSync(fd);
      }
    } catch {
      continue;
    }
    if (bytes.subarray(0, BINARY_PROBE).includes(0)) continue;
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      continue;
    }
    const lines = text.split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    for (let i = 0; i < lines.length; i++) {
      const l = lines[i]!.replace(/\r$/, "");
      const m = re.exec(l);
      if (!m) continue;
      if (matches.length >= req.limit) {
        more = true;
        return { matches, more, stderr: "", ok: true, engine: "builtin" };
      }
      matches.push({ abs, line: i + 1, column: m.index + 1, text: l });
    }
  }
  return { matches, more, stderr: "", ok: true, engine: "builtin" };
}

function globSource(g: string): string {
  // Same translation as the discovery tools, inlined to keep this module free of tool imports.
  return g
    .split("**/")
    .map((part) =>
      part
        .replace(/[.+^${}()|\\]/g, "\\$&")
        .replace(/\*/g, "[^/]*")
        .replace(/\?/g, "[^/]"),
    )
    .join("(?:.*/)?");
}
