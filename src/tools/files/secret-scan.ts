import { closeSync, fstatSync, readSync } from "node:fs";
import { z } from "zod";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { checkCanonical, openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { globToRegex, walk } from "../../fs/walk.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor } from "./common.ts";
import description from "./secret-scan.md" with { type: "text" };

interface Pattern {
  type: string;
  re: RegExp;
  /** Capture group holding the secret value, for placeholder suppression. */
  value?: number;
}

export const SECRET_PATTERNS: Pattern[] = [
  { type: "aws_access_key", re: /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/ },
  { type: "aws_secret_key", re: /aws_secret_access_key\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})\b/i, value: 1 },
  { type: "github_token", re: /\b(?:gh[pousr]_[A-Za-z0-9_]{36,}|github_pat_[A-Za-z0-9_]{60,})\b/ },
  { type: "gitlab_token", re: /\bglpat-[A-Za-z0-9_-]{20,}\b/ },
  { type: "slack_token", re: /\bxox[abprs]-[A-Za-z0-9-]{10,}\b/ },
  { type: "stripe_key", re: /\b[sr]k_live_[A-Za-z0-9]{20,}\b/ },
  { type: "google_api_key", re: /\bAIza[0-9A-Za-z_-]{35}\b/ },
  { type: "openai_key", re: /\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}\b/ },
  { type: "anthropic_key", re: /\bsk-ant-[A-Za-z0-9_-]{32,}\b/ },
  { type: "private_key", re: /-----BEGIN (?:RSA |OPENSSH |EC |DSA |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----/ },
  { type: "jwt", re: /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/ },
  { type: "url_password", re: /\b[a-z][a-z0-9+.-]*:\/\/[^\s:/@"'<>]+:([^\s@/"'<>]{3,})@[^\s"'<>]+/i, value: 1 },
  { type: "generic_assignment", re: /(?:token|secret|password|passwd|pwd|api[_-]?key|access[_-]?key|client[_-]?secret)\w*["']?\s*[:=]\s*["']([^"'\s]{8,})["']/i, value: 1 },
  { type: "dotenv_assignment", re: /^\s*(?:export\s+)?[A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*\s*=\s*["']?([^"'\s#]{8,})/, value: 1 },
];

const PLACEHOLDER = /\$\{[^}]+\}|\$[A-Z_]|<[^>]*>|change[-_ ]?me|replace[-_ ]?me|placeholder|example|dummy|fake|fixture|test[-_ ]?only|local[-_ ]?only|your[-_]|x{6,}|\*{4,}/i;

function isPlaceholder(v: string): boolean {
  if (v === "" || PLACEHOLDER.test(v)) return true;
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
    findings: z.array(z.object({ type: z.string(), path: z.string(), line: z.number().int(), preview: z.string().optional() })),
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
    walk(base.real, { gitignore: true, hidden: true, skipIgnored: true, maxDepth: 1_000, exclude: policy.stateDir, workspaceRoot: ctx.app.workspaceRoot, signal: ctx.signal }, (e) => {
      if (!e.dirent.isFile()) return;
      if (globRe && !globRe.test(e.rel)) return;
      files.push(e.abs);
    });
    // Dotenv files are usually .gitignore'd, and they are where secrets live: add them deliberately.
    const listed = new Set(files);
    walk(base.real, { gitignore: false, hidden: true, skipIgnored: true, maxDepth: 1_000, exclude: policy.stateDir, signal: ctx.signal }, (e) => {
      if (e.dirent.isFile() && DOTENV.test(e.dirent.name) && !listed.has(e.abs) && (!globRe || globRe.test(e.rel))) files.push(e.abs);
    });
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
        for (const p of SECRET_PATTERNS) {
          const m = p.re.exec(line);
          if (!m) continue;
          const value = p.value !== undefined ? (m[p.value] ?? "") : m[0];
          if (p.value !== undefined && isPlaceholder(value)) continue;
          if (findings.length >= max) {
            truncated = true;
            break outer;
          }
          findings.push({ type: p.type, path: rel, line: i + 1, preview: mask(value) });
          break;
        }
      }
    }
    return { findings, truncated, truncated_files: truncatedFiles, files_scanned: scanned };
  },
  text: (o) => [...o.findings.map((f) => `${f.path}:${f.line}\t${f.type}\t${f.preview}`), o.truncated ? "[truncated]" : "", `${o.findings.length} finding(s) in ${o.files_scanned} file(s)`].filter(Boolean).join("\n"),
});
