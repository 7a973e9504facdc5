import { closeSync, fstatSync, readSync } from "node:fs";
import { z } from "zod";
import { findSecrets, SECRET_RULES } from "../../audit/secret-rules.ts";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { checkCanonical, openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { globToRegex, walk } from "../../fs/walk.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor } from "./common.ts";
import description from "./secret-scan.md" with { type: "text" };

const PLACEHOLDERS = [
  /\$\{[^}]+\}|\$[A-Z_]|<[^>]*>|change[-_ ]?me|replace[-_ ]?me|placeholder|example|dummy|fake/i,
  /fixture|test[-_ ]?only|local[-_ ]?only|your[-_]|x{6,}|\*{4,}/i,
];

function isPlaceholder(v: string): boolean {
  if (v === "" || PLACEHOLDERS.some((p) => p.test(v))) return true;
  return new Set(v.replace(/[^A-Za-z0-9]/g, "").toLowerCase()).size <= 2;
}

/** A masked preview: the first 4 characters, then the length. */
function mask(v: string): string {
  return `${v.slice(0, 4)}…(${v.length} chars)`;
}

const MAX_SCAN_FILE_BYTES = 512_000;
const DOTENV = /^\.env(?:\..+)?$|\.env$/;

export const secretScan = defineTool({
  name: "secret_scan",
  title: "Scan for secrets",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    cwd: z.string().default("."),
    glob: z.string().max(1000).nullable().default(null),
    max_results: z.number().int().default(200),
  }),
  output: z.object({
    findings: z.array(
      z.object({ type: z.string(), path: z.string(), line: z.number().int(), preview: z.string().optional() }),
    ),
    truncated: z.boolean(),
    truncated_files: z.number().int(),
    files_scanned: z.number().int().optional(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const base = resolveInWorkdir(policy, input.cwd, { mustExist: true });
    const max = Math.max(1, Math.min(input.max_results, ctx.app.settings.max_grep_results));
    const globRe = input.glob ? new RegExp(`^(?:.*/)?${globToRegex(input.glob)}$`) : undefined;
    // Secret files are exactly what this tool must see: the path denylist does not hide them here,
    // but the state dir and paths outside the workdir stay refused.
    const scanPolicy = { ...policy, denylist: [] };
    const findings: Array<{ type: string; path: string; line: number; preview: string }> = [];
    let truncated = false;
    let truncatedFiles = 0;
    let scanned = 0;
    const files: string[] = [];
    walk(
      base.real,
      {
        gitignore: true,
        hidden: true,
        skipIgnored: true,
        maxDepth: 1_000,
        exclude: policy.stateDir,
        workspaceRoot: ctx.app.workspaceRoot,
        signal: ctx.signal,
      },
      (e) => {
        if (!e.dirent.isFile()) return;
        if (globRe && !globRe.test(e.rel)) return;
        files.push(e.abs);
      },
    );
    // Dotenv files are usually .gitignore'd, and they are where secrets live: add them deliberately.
    const listed = new Set(files);
    walk(
      base.real,
      {
        gitignore: false,
        hidden: true,
        skipIgnored: true,
        maxDepth: 1_000,
        exclude: policy.stateDir,
        signal: ctx.signal,
      },
      (e) => {
        if (e.dirent.isFile() && DOTENV.test(e.dirent.name) && !listed.has(e.abs) && (!globRe || globRe.test(e.rel)))
          files.push(e.abs);
      },
    );
    const decoder = new TextDecoder("utf-8", { fatal: true });
    outer: for (const abs of files) {
      let text: string;
      try {
        checkCanonical(scanPolicy, abs, abs);
        const fd = openChecked(scanPolicy, abs, abs);
        try {
          const size = fstatSync(fd).size;
          const n = Math.min(size, MAX_SCAN_FILE_BYTES);
          const buf = Buffer.allocUnsafe(n);
          let off = 0;
          while (off < n) {
            const r = readSync(fd, buf, off, n - off, off);
            if (r === 0) break;
            off += r;
          }
          if (size > MAX_SCAN_FILE_BYTES) truncatedFiles++;
          if (buf.subarray(0, Math.min(off, 8192)).includes(0)) continue;
          let end = off;
          // Drop a partial UTF-8 sequence at a cut.
          while (size > off && end > 0 && (buf[end - 1]! & 0xc0) === 0x80) end--;
          if (size > off && end > 0 && buf[end - 1]! >= 0xc0) end--;
          text = decoder.decode(buf.subarray(0, end));
        } finally {
          closeSync(fd);
        }
      } catch {
        continue;
      }
      scanned++;
      const rel = toWorkspaceRelative(ctx.app.workspaceRoot, abs);
      const lines = text.split("\n");
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i]!;
        if (line.length > 20_000) continue;
        // The audit redaction's rule set; a line is reported once, under the first rule (in the
        // set's order, specific to generic) that finds a value other than a placeholder.
        const found = findSecrets(line, SECRET_RULES).filter((f) => f.rule.group === 0 || !isPlaceholder(f.secret));
        if (found.length === 0) continue;
        const first = found.reduce((a, b) => (SECRET_RULES.indexOf(b.rule) < SECRET_RULES.indexOf(a.rule) ? b : a));
        if (findings.length >= max) {
          truncated = true;
          break outer;
        }
        // The bare-key rule reports under the AWS secret key type it stands for.
        const type = first.rule.id === "aws_secret_key_bare" ? "aws_secret_key" : first.rule.id;
        findings.push({ type, path: rel, line: i + 1, preview: mask(first.secret) });
      }
    }
    return { findings, truncated, truncated_files: truncatedFiles, files_scanned: scanned };
  },
  text: (o) =>
    [
      ...o.findings.map((f) => `${f.path}:${f.line}\t${f.type}\t${f.preview}`),
      o.truncated ? "[truncated]" : "",
      `${o.findings.length} finding(s) in ${o.files_scanned} file(s)`,
    ]
      .filter(Boolean)
      .join("\n"),
});
