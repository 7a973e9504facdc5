import { ToolError } from "../core/errors.ts";

export type Hunk =
  | { kind: "replace"; start: number; end: number; old: string[]; plus: string[] }
  | { kind: "swap"; start: number; end: number; plus: string[] }
  | { kind: "insert"; after: boolean; anchor: number; plus: string[] };

export interface Block {
  path: string;
  snapshot: string;
  hunks: Hunk[];
}

const HEADER = /^\[(.+)#([^\]#]+)\]$/;
// "N:" rows as read shows them; "N-" context rows as search shows them.
const ROW = /^(\d+)[:-](.*)$/;
const SWAP = /^SWAP\s+(\d+)(?:\s*-\s*(\d+))?\s*:\s*$/i;
const INSERT = /^INSERT(?:\s+(BEFORE|AFTER))?\s+(\d+)\s*:\s*$/i;

function bad(message: string): ToolError {
  return new ToolError("hashline_invalid", message);
}

function lineNo(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) throw bad("line numbers must be >= 1");
  return n;
}

function plusRows(rows: string[]): string[] {
  return rows.map((r) => {
    if (!r.startsWith("+")) throw bad("hashline replacement lines must start with '+'");
    return r.slice(1);
  });
}

function parseHunk(rows: string[]): Hunk {
  const first = rows[0]!;
  const swap = SWAP.exec(first);
  if (swap) {
    const start = lineNo(swap[1]!);
    const end = swap[2] === undefined ? start : lineNo(swap[2]);
    if (end < start) throw bad("SWAP end line must be >= start line");
    return { kind: "swap", start, end, plus: plusRows(rows.slice(1)) };
  }
  const ins = INSERT.exec(first);
  if (ins) {
    const plus = plusRows(rows.slice(1));
    if (plus.length === 0) throw bad("hashline edit requires at least one + replacement line");
    return { kind: "insert", after: (ins[1] ?? "BEFORE").toUpperCase() === "AFTER", anchor: lineNo(ins[2]!), plus };
  }
  const old: string[] = [];
  let start = 0;
  let i = 0;
  for (; i < rows.length && !rows[i]!.startsWith("+"); i++) {
    const m = ROW.exec(rows[i]!);
    if (!m)
      throw bad(
        `hashline old lines must use '<line>:<text>' rows copied from read/search output ` +
          `(got: ${rows[i]!.slice(0, 80)})`,
      );
    const n = lineNo(m[1]!);
    if (old.length === 0) start = n;
    else if (n !== start + old.length) throw bad("hashline old lines must be consecutive");
    old.push(m[2]!);
  }
  if (old.length === 0)
    throw bad("hashline edit must include old lines or a directive (SWAP N-M: or INSERT BEFORE|AFTER N:)");
  return { kind: "replace", start, end: start + old.length - 1, old, plus: plusRows(rows.slice(i)) };
}

/** Parses hashline edit input: `[path#snapshot]` headers, hunks separated by blank lines. */
export function parseHashline(input: string): Block[] {
  const lines = input.split("\n").map((l) => l.replace(/\r$/, ""));
  while (lines.length && lines[0]!.trim() === "") lines.shift();
  while (lines.length && lines[lines.length - 1]!.trim() === "") lines.pop();
  if (lines.length === 0) throw bad("hashline edit input is empty");
  const blocks: Block[] = [];
  let rows: string[] = [];
  const flush = () => {
    if (rows.length === 0) return;
    const block = blocks[blocks.length - 1];
    if (!block) throw bad("hashline edit input must start with [path#snapshot_id]");
    block.hunks.push(parseHunk(rows));
    rows = [];
  };
  for (const line of lines) {
    const header = HEADER.exec(line.trim());
    if (header && !ROW.test(line)) {
      flush();
      blocks.push({ path: header[1]!, snapshot: header[2]!, hunks: [] });
      continue;
    }
    if (blocks.length === 0) throw bad("hashline edit input must start with [path#snapshot_id]");
    if (line.trim() === "") {
      flush();
      continue;
    }
    rows.push(line);
  }
  flush();
  if (blocks.every((b) => b.hunks.length === 0)) throw bad("hashline edit input must include an edit hunk");
  return blocks.filter((b) => b.hunks.length > 0);
}

/** Original line span a hunk occupies (for overlap and grounding checks). */
export function hunkSpan(h: Hunk): { start: number; end: number } {
  if (h.kind === "insert") return { start: h.anchor, end: h.anchor };
  return { start: h.start, end: h.end };
}
