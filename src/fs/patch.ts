import { ToolError } from "../core/errors.ts";
import { type LineDoc, replaceLines } from "./lines.ts";

export type PatchLine = { op: " " | "-" | "+"; text: string };

export interface PatchHunk {
  /** Text after `@@` in an envelope: a line to find before the hunk when its context repeats. */
  anchor: string;
  /** Old start line from a unified `@@ -a,b +c,d @@` header. */
  oldStart: number | null;
  lines: PatchLine[];
  /** The hunk must end at the end of the file. */
  eof: boolean;
  /** Unified diff: the old / new side's last line has no newline. */
  oldNoEol: boolean;
  newNoEol: boolean;
}

export interface FileOp {
  kind: "add" | "delete" | "update";
  path: string;
  moveTo: string | null;
  hunks: PatchHunk[];
  /** For add: the content lines and whether the last one ends with a newline. */
  addLines: string[];
  addFinalNewline: boolean;
}

function invalid(message: string): ToolError {
  return new ToolError("patch_invalid", message);
}

/** Parses an `*** Begin Patch` envelope or a unified diff. */
export function parsePatch(text: string): FileOp[] {
  const body = text.replace(/^\uFEFF/, "");
  const lines = body.split("\n").map((l) => l.replace(/\r$/, ""));
  while (lines.length && lines[lines.length - 1]!.trim() === "") lines.pop();
  const firstReal = lines.findIndex((l) => l.trim() !== "");
  if (firstReal >= 0 && lines[firstReal]!.trim() === "*** Begin Patch") return parseEnvelope(lines.slice(firstReal));
  return parseUnified(lines);
}

function parseEnvelope(lines: string[]): FileOp[] {
  const end = lines.findIndex((l) => l.trim() === "*** End Patch");
  if (end < 0) throw invalid("apply_patch envelope is missing '*** End Patch'");
  if (lines.slice(end + 1).some((l) => l.trim() !== "")) throw invalid("unexpected content after '*** End Patch'");
  const ops: FileOp[] = [];
  let i = 1;
  while (i < end) {
    const line = lines[i]!;
    const header = /^\*\*\* (Add|Delete|Update) File: (.+)$/.exec(line.trim());
    if (!header) {
      if (line.trim() === "") {
        i++;
        continue;
      }
      throw invalid(`expected file action at envelope line ${i + 1}: '${line.slice(0, 100)}'`);
    }
    const kind = header[1] === "Add" ? "add" : header[1] === "Delete" ? "delete" : "update";
    const op: FileOp = { kind, path: header[2]!.trim(), moveTo: null, hunks: [], addLines: [], addFinalNewline: true };
    i++;
    const isAction = (l: string) => /^\*\*\* (Add|Delete|Update) File: /.test(l.trim());
    if (kind === "add") {
      while (i < end && !isAction(lines[i]!)) {
        const l = lines[i]!;
        if (l.startsWith("+")) op.addLines.push(l.slice(1));
        else if (l.trim() !== "") throw invalid(`added file lines must start with '+' (${op.path}, line ${i + 1})`);
        i++;
      }
    } else if (kind === "delete") {
      while (i < end && !isAction(lines[i]!)) {
        if (lines[i]!.trim() !== "") throw invalid(`delete action must not contain patch lines: ${op.path}`);
        i++;
      }
    } else {
      const move = /^\*\*\* Move to: (.+)$/.exec(lines[i]?.trim() ?? "");
      if (move) {
        op.moveTo = move[1]!.trim();
        i++;
      }
      let hunk: PatchHunk | undefined;
      while (i < end && !isAction(lines[i]!)) {
        const l = lines[i]!;
        if (l.startsWith("@@")) {
          hunk = {
            anchor: l
              .slice(2)
              .replace(/@@\s*$/, "")
              .trim(),
            oldStart: null,
            lines: [],
            eof: false,
            oldNoEol: false,
            newNoEol: false,
          };
          op.hunks.push(hunk);
        } else if (l.trim() === "*** End of File") {
          if (!hunk) throw invalid(`unexpected end-of-file marker in ${op.path}`);
          hunk.eof = true;
        } else {
          if (!hunk) {
            // Models often omit the first @@: start an unanchored hunk.
            hunk = { anchor: "", oldStart: null, lines: [], eof: false, oldNoEol: false, newNoEol: false };
            op.hunks.push(hunk);
          }
          const c = l[0];
          if (l === "") hunk.lines.push({ op: " ", text: "" });
          else if (c === " " || c === "-" || c === "+") hunk.lines.push({ op: c, text: l.slice(1) });
          else throw invalid(`invalid hunk line ${i + 1} for ${op.path}: '${l.slice(0, 100)}'`);
        }
        i++;
      }
      // Empty lines closing a hunk are usually separators; dropping them only loses context.
      for (const h of op.hunks) {
        while (h.lines.length && h.lines[h.lines.length - 1]!.op === " " && h.lines[h.lines.length - 1]!.text === "")
          h.lines.pop();
      }
      if (op.hunks.length === 0 && !op.moveTo) throw invalid(`update action contains no hunks: ${op.path}`);
    }
    ops.push(op);
  }
  if (ops.length === 0) throw invalid("patch envelope contains no file actions");
  return ops;
}

function stripPrefix(p: string): string {
  const t = p.split("\t")[0]!.trim();
  if (t === "/dev/null") return t;
  return t.replace(/^[ab]\//, "");
}

function parseUnified(lines: string[]): FileOp[] {
  const ops: FileOp[] = [];
  let i = 0;
  let renameFrom: string | null = null;
  let renameTo: string | null = null;
  while (i < lines.length) {
    const l = lines[i]!;
    if (l.startsWith("diff --git ")) {
      renameFrom = renameTo = null;
      i++;
      continue;
    }
    if (l.startsWith("rename from ")) renameFrom = l.slice(12).trim();
    if (l.startsWith("rename to ")) renameTo = l.slice(10).trim();
    if (renameFrom && renameTo && !(lines[i + 1] ?? "").startsWith("--- ")) {
      ops.push({ kind: "update", path: renameFrom, moveTo: renameTo, hunks: [], addLines: [], addFinalNewline: true });
      renameFrom = renameTo = null;
      i++;
      continue;
    }
    if (!l.startsWith("--- ") || !(lines[i + 1] ?? "").startsWith("+++ ")) {
      i++;
      continue;
    }
    const oldPath = stripPrefix(l.slice(4));
    const newPath = stripPrefix(lines[i + 1]!.slice(4));
    i += 2;
    const hunks: PatchHunk[] = [];
    while (i < lines.length && lines[i]!.startsWith("@@")) {
      const m = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$/.exec(lines[i]!);
      if (!m) throw invalid(`invalid hunk header: '${lines[i]!.slice(0, 100)}'`);
      let oldLeft = m[2] === undefined ? 1 : Number(m[2]);
      let newLeft = m[4] === undefined ? 1 : Number(m[4]);
      const hunk: PatchHunk = {
        anchor: "",
        oldStart: Number(m[1]),
        lines: [],
        eof: false,
        oldNoEol: false,
        newNoEol: false,
      };
      i++;
      while (i < lines.length && (oldLeft > 0 || newLeft > 0 || lines[i]!.startsWith("\\"))) {
        const h = lines[i]!;
        if (h.startsWith("\\")) {
          const prev = hunk.lines[hunk.lines.length - 1];
          if (prev?.op !== "+") hunk.oldNoEol = true;
          if (prev?.op !== "-") hunk.newNoEol = true;
          i++;
          continue;
        }
        const c = h === "" ? " " : h[0];
        if (c !== " " && c !== "-" && c !== "+") break;
        hunk.lines.push({ op: c, text: h.slice(1) });
        if (c !== "+") oldLeft--;
        if (c !== "-") newLeft--;
        i++;
      }
      while (i < lines.length && lines[i]!.startsWith("\\")) {
        const prev = hunk.lines[hunk.lines.length - 1];
        if (prev?.op !== "+") hunk.oldNoEol = true;
        if (prev?.op !== "-") hunk.newNoEol = true;
        i++;
      }
      if (oldLeft > 0 || newLeft > 0)
        throw invalid(
          `hunk ${hunks.length + 1} of ${newPath === "/dev/null" ? oldPath : newPath} is shorter than its header says`,
        );
      hunks.push(hunk);
    }
    if (oldPath === "/dev/null") {
      const h = hunks[0];
      ops.push({
        kind: "add",
        path: newPath,
        moveTo: null,
        hunks: [],
        addLines: h ? h.lines.filter((x) => x.op === "+").map((x) => x.text) : [],
        addFinalNewline: !(h?.newNoEol ?? false),
      });
    } else if (newPath === "/dev/null") {
      ops.push({ kind: "delete", path: oldPath, moveTo: null, hunks: [], addLines: [], addFinalNewline: true });
    } else {
      ops.push({
        kind: "update",
        path: oldPath,
        moveTo: newPath !== oldPath ? newPath : renameTo,
        hunks,
        addLines: [],
        addFinalNewline: true,
      });
    }
    renameFrom = renameTo = null;
  }
  if (ops.length === 0)
    throw invalid(
      "patch does not contain any file changes (expected '*** Begin Patch' or a unified diff with ---/+++ headers)",
    );
  return ops;
}

function findSeq(
  lines: readonly string[],
  seq: readonly string[],
  from: number,
  norm: (s: string) => string,
): number[] {
  const hits: number[] = [];
  if (seq.length === 0) return hits;
  const want = seq.map(norm);
  for (let i = from; i + seq.length <= lines.length; i++) {
    let ok = true;
    for (let j = 0; j < seq.length; j++) {
      if (norm(lines[i + j]!) !== want[j]) {
        ok = false;
        break;
      }
    }
    if (ok) hits.push(i);
  }
  return hits;
}

export interface HunkNote {
  hunk: number;
  note: string;
}

/**
 * Applies the hunks of one update to a document, in order, each searched from where the previous one
 * ended. Exact matches are preferred; then trailing-whitespace and surrounding-whitespace tolerant
 * ones (noted). Repeated context is disambiguated by the `@@` anchor text or the unified old line.
 */
export function applyHunks(doc: LineDoc, hunks: readonly PatchHunk[], shown: string, notes: HunkNote[]): LineDoc {
  let cur = doc;
  let cursor = 0;
  hunks.forEach((h, k) => {
    const n = k + 1;
    const old = h.lines.filter((l) => l.op !== "+").map((l) => l.text);
    const neu = h.lines.filter((l) => l.op !== "-").map((l) => l.text);
    let from = cursor;
    if (h.anchor) {
      const a = h.anchor.trim();
      const idx = cur.lines.findIndex((l, i) => i >= cursor && l.includes(a));
      if (idx >= 0) from = old.length ? idx : idx + 1;
      else if (old.length === 0)
        throw new ToolError("patch_failed", `hunk ${n} of ${shown}: anchor '${a.slice(0, 80)}' not found`);
    }
    let at: number;
    if (old.length === 0) {
      if (h.eof) at = cur.lines.length;
      else if (h.oldStart !== null) at = Math.min(h.oldStart, cur.lines.length);
      else if (h.anchor) at = from;
      else
        throw new ToolError(
          "patch_failed",
          `hunk ${n} of ${shown} has no context; use '*** End of File' to append or an @@ anchor line`,
        );
    } else {
      const modes: Array<[string, (s: string) => string]> = [
        ["exact", (s) => s],
        ["ignoring trailing whitespace", (s) => s.trimEnd()],
        ["ignoring surrounding whitespace", (s) => s.trim()],
      ];
      let hits: number[] = [];
      let mode = "exact";
      for (const [name, norm] of modes) {
        hits = findSeq(cur.lines, old, from, norm);
        if (!hits.length && from !== cursor) hits = findSeq(cur.lines, old, cursor, norm);
        if (hits.length) {
          mode = name;
          break;
        }
      }
      if (h.eof) hits = hits.filter((i) => i + old.length === cur.lines.length);
      if (hits.length === 0) {
        const near = nearestPlace(cur.lines, old, h.oldStart ?? cursor);
        throw new ToolError(
          "patch_failed",
          `hunk ${n} of ${shown} does not match the file${h.eof ? " end" : ""}; first expected line: ` +
            `'${(old[0] ?? "").slice(0, 100)}'`,
          {
            hunk: n,
            path: shown,
            ...(near !== null ? { nearest_line: near + 1, expected_lines: old.length } : {}),
          },
        );
      }
      if (hits.length > 1 && h.oldStart !== null) {
        const target = h.oldStart - 1;
        hits.sort((a, b) => Math.abs(a - target) - Math.abs(b - target));
        hits = [hits[0]!];
      }
      if (hits.length > 1) {
        throw new ToolError(
          "patch_failed",
          `hunk ${n} matches ${hits.length} locations in ${shown} (lines ${hits
            .slice(0, 5)
            .map((x) => x + 1)
            .join(", ")}); add more context or an @@ anchor line`,
          { hunk: n, path: shown },
        );
      }
      at = hits[0]!;
      if (mode !== "exact") notes.push({ hunk: n, note: `hunk ${n} of ${shown} matched ${mode}` });
    }
    const touchesEnd = at + old.length === cur.lines.length;
    cur = replaceLines(cur, at + 1, at + old.length, neu);
    if (touchesEnd && neu.length > 0 && (h.newNoEol || h.oldNoEol)) {
      const eols = cur.eols.slice();
      const lastIdx = at + neu.length - 1;
      eols[lastIdx] = h.newNoEol ? "" : (eols.find((e) => e !== "") ?? "\n");
      cur = { lines: cur.lines, eols };
    }
    cursor = at + neu.length;
  });
  return cur;
}

/**
 * Where a hunk's old lines come closest to the file (0-based start), for the error that shows the
 * actual lines: the start whose window agrees with most old lines (ignoring surrounding whitespace),
 * nearest to `hint` on ties. When no line agrees, the hunk's own place (`hint`: its `@@` line number
 * or where the previous hunk ended), so a failed patch always shows lines to retry with. Null only
 * for an empty file or hunk, or a search too large to be quick.
 */
export function nearestPlace(lines: readonly string[], old: readonly string[], hint: number): number | null {
  if (old.length === 0 || lines.length === 0 || lines.length * old.length > 4_000_000) return null;
  const want = old.map((l) => l.trim());
  let best: { at: number; score: number } | null = null;
  for (let at = 0; at < lines.length; at++) {
    let score = 0;
    for (let k = 0; k < want.length && at + k < lines.length; k++) if (lines[at + k]!.trim() === want[k]) score++;
    if (score === 0) continue;
    if (!best || score > best.score || (score === best.score && Math.abs(at - hint) < Math.abs(best.at - hint)))
      best = { at, score };
  }
  return best ? best.at : Math.max(0, Math.min(hint, lines.length - 1));
}
