import { closeSync, openSync, readSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { walk } from "./walk.ts";

export interface RawMatch {
  /** Absolute path of the file. */
  abs: string;
  line: number;
  /** 1-based character column of the first match on the line. */
  column: number;
  text: string;
}

export interface SearchRequest {
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

/** Content search: ripgrep when present (sorted by path, JSON output), else the built-in walker. */
export async function searchFiles(req: SearchRequest): Promise<SearchOutcome> {
  const rg = rgPath(req.rgBin);
  if (rg) return ripgrep(rg, req);
  return builtin(req);
}

async function ripgrep(rg: string, req: SearchRequest): Promise<SearchOutcome> {
  const args = [rg, "--json", "--line-number", "--column", "--sort", "path", "--no-config"];
  if (!req.gitignore) args.push("--no-ignore");
  if (req.hidden) args.push("--hidden", "--glob", "!.git");
  if (!req.regex) args.push("--fixed-strings");
  if (!req.caseSensitive) args.push("--ignore-case");
  for (const g of req.globs) args.push("--glob", g);
  if (req.exclude) {
    const rel = relative(req.cwd, req.exclude);
    if (!rel.startsWith("..")) args.push("--glob", `!/${rel.split(sep).join("/")}`, "--glob", `!/${rel.split(sep).join("/")}/**`);
  }
  args.push("-e", req.pattern, "--");
  args.push(...(req.roots.length ? req.roots.map((r) => relative(req.cwd, r) || ".") : ["."]));
  const proc = Bun.spawn(args, { cwd: req.cwd, stdin: "ignore", stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
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
        const ev = JSON.parse(line) as { data: { path: { text?: string }; lines: { text?: string; bytes?: string }; line_number: number; submatches: Array<{ start: number }> } };
        const d = ev.data;
        if (d.path.text === undefined) continue;
        if (matches.length >= req.limit) {
          more = true;
          stopped = true;
          kill();
          break outer;
        }
        const text = (d.lines.text ?? Buffer.from(d.lines.bytes ?? "", "base64").toString("utf8")).replace(/\r?\n$/, "");
        const startByte = d.submatches[0]?.start ?? 0;
        const column = Buffer.from(d.lines.text ?? "").subarray(0, startByte).toString("utf8").length + 1;
        matches.push({ abs: join(req.cwd, d.path.text), line: d.line_number, column, text });
      }
    }
  } finally {
    clearTimeout(timer);
    req.signal.removeEventListener("abort", kill);
  }
  const code = await proc.exited;
  const stderr = (await stderrP).slice(0, MAX_STDERR);
  const timedOut = !stopped && code !== 0 && code !== 1 && code !== 2 && proc.signalCode !== null;
  return { matches, more, stderr: timedOut ? `${stderr}search timed out`.trim() : stderr, ok: stopped || code === 0 || code === 1, engine: "ripgrep" };
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
    return { matches: [], more: false, stderr: `invalid pattern: ${(e as Error).message}`, ok: false, engine: "builtin" };
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
    walk(root, { gitignore: req.gitignore, hidden: req.hidden, skipIgnored: req.gitignore, maxDepth: 1_000, exclude: req.exclude, signal: req.signal }, (e) => {
      if (e.dirent.isFile() && wanted(relative(req.cwd, e.abs).split(sep).join("/"))) files.push(e.abs);
      if (!req.gitignore && e.dirent.name === ".git") return "skip";
    });
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
    .map((part) => part.replace(/[.+^${}()|\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(/\?/g, "[^/]"))
    .join("(?:.*/)?");
}
