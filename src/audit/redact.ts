/**
 * Sanitising of audit values before they are stored: the secret rule set shared with `secret_scan`
 * (secret-rules.ts: token formats, private keys, passwords on command lines), credential-like keys
 * and flags, bearer tokens, URL queries and userinfo, tokenized download links and the configured
 * admin PIN are replaced; structures are bounded in depth, width and string length. A free-form
 * secret found once (a password after `mysql -p`, the value of an env entry named like one) is
 * remembered for a while and scrubbed wherever it shows up again, as when a command echoes it.
 */

import { LARGE_STRING_CHARS, LargeStringMemo, stringBytes } from "../core/large-memo.ts";
import { findSecrets, replaceSecrets } from "./secret-rules.ts";

export const REDACTED = "<redacted>";
export const TRUNCATED_KEY = "$local_shell_mcp_audit_truncated";
export const BINARY_KEY = "$local_shell_mcp_audit_binary";
export const CYCLE_KEY = "$local_shell_mcp_audit_cycle";

const SENSITIVE =
  "authorization|cookie|credentials?|api[_-]?key|access[_-]?key|private[_-]?key|token|secret|password|passwd" +
  "|passphrase|(?<![a-z])pass(?![a-z])|(?<![a-z])pin(?![a-z])";
const SENSITIVE_KEY = new RegExp(SENSITIVE, "i");
const KEPT_KEY = /(_sha256|_fingerprint|_token_id)$/i;
const FLAG = new RegExp(`^--?[\\w.-]*(${SENSITIVE})[\\w.-]*$`, "i");

/** A flag's value: a quoted string (which may hold spaces) or one word. */
const FLAG_VALUE = `"[^"\\n]{0,1024}"|'[^'\\n]{0,1024}'|\\S+`;

const MAX_DEPTH = 12;
const MAX_ITEMS = 200;
const MAX_KEY_CHARS = 256;

/** True when a field or map key names a credential. */
export function isSensitiveKey(key: string): boolean {
  if (KEPT_KEY.test(key)) return false;
  return SENSITIVE_KEY.test(key);
}

export interface Redactor {
  /** Sanitises any JSON-ish value. */
  value(v: unknown): unknown;
  /** Scrubs one free-text string. */
  text(s: string): string;
}

type Rule = { re: RegExp; rep: string | ((...m: string[]) => string); needle?: string };

// Each rule names a substring it cannot match without, so large values (file contents, command
// output) skip the regexes that cannot apply; the regexes themselves scan from many start positions.
const TEXT_RULES: Rule[] = [
  // --token=V, --password=V (a quoted V may hold spaces)
  {
    re: new RegExp(`(--?[\\w.-]*(?:${SENSITIVE})[\\w.-]*)=(${FLAG_VALUE})`, "gi"),
    rep: (_m, k) => `${k}=${REDACTED}`,
    needle: "-",
  },
  // --password V
  {
    re: new RegExp(`(--?[\\w.-]*(?:${SENSITIVE})[\\w.-]*)\\s+(?!-)(${FLAG_VALUE})`, "gi"),
    rep: (_m, k) => `${k} ${REDACTED}`,
    needle: "-",
  },
  // Authorization header lines and bearer/basic credentials
  {
    re: /\b(authorization|proxy-authorization|cookie|set-cookie)\s*:\s*[^\r\n]*/gi,
    rep: (_m, k) => `${k}: ${REDACTED}`,
  },
  { re: /\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi, rep: (_m, k) => `${k} ${REDACTED}` },
  // URL userinfo and query strings
  // user:password@ (the user may be empty, the password may hold '@'), or a token-like user alone
  {
    re: /(\b[a-z][a-z0-9+.-]*:\/\/)(?:[^\s/?#@:]*:[^\s/?#]*|[A-Za-z0-9._~%+-]{20,})@/gi,
    rep: (_m, s) => `${s}${REDACTED}@`,
    needle: "://",
  },
  { re: /(\b[a-z][a-z0-9+.-]*:\/\/[^\s?#"'<>]+)\?[^\s#"'<>]*/gi, rep: (_m, u) => `${u}?${REDACTED}`, needle: "://" },
  // Tokenized download links
  { re: /(\/download\/)[A-Za-z0-9_-]{8,}/g, rep: (_m, p) => `${p}${REDACTED}`, needle: "/download/" },
];

const PAIR_KEYWORD = new RegExp(`${SENSITIVE}|\\bkey\\b`, "gi");
const WORD_CHAR = /[\w.-]/;
const SPACE = /\s/;

/**
 * Redacts the value of `key=value` and `"key": "value"` pairs whose key names a credential. A
 * linear scan from each keyword hit: a single regex with a free-form key prefix backtracks over
 * every word of a large text.
 */
function redactPairs(s: string, learn: (secret: string) => void): string {
  let out = "";
  let last = 0;
  PAIR_KEYWORD.lastIndex = 0;
  for (let m = PAIR_KEYWORD.exec(s); m !== null; m = PAIR_KEYWORD.exec(s)) {
    let j = m.index + m[0].length;
    while (j < s.length && WORD_CHAR.test(s[j]!)) j++;
    const keyEnd = j;
    if (s[j] === '"' || s[j] === "'") j++;
    while (j < s.length && SPACE.test(s[j]!)) j++;
    if (s[j] !== ":" && s[j] !== "=") {
      PAIR_KEYWORD.lastIndex = keyEnd;
      continue;
    }
    j++;
    while (j < s.length && SPACE.test(s[j]!)) j++;
    let end = j;
    const quote = s[j];
    const close = quote === '"' || quote === "'" ? closingQuote(s, quote, j + 1) : -1;
    if (close >= 0) end = close + 1;
    else while (end < s.length && !/[\s,;&}]/.test(s[end]!)) end++;
    if (end === j) {
      PAIR_KEYWORD.lastIndex = keyEnd;
      continue;
    }
    learn(close >= 0 ? s.slice(j + 1, close) : s.slice(j, end));
    out += s.slice(last, j) + REDACTED;
    last = end;
    PAIR_KEYWORD.lastIndex = end;
  }
  return last === 0 ? s : out + s.slice(last);
}

/** Index of the quote closing a string that opened before `from`, skipping backslash escapes. */
function closingQuote(s: string, quote: string, from: number): number {
  for (let i = from; i < s.length; i++) {
    if (s[i] === "\\") i++;
    else if (s[i] === quote) return i;
  }
  return -1;
}

function jsonQuoted(s: string): string {
  return JSON.stringify(s).slice(1, -1);
}

/** Free-form secrets remembered at most, for how long, and the shortest worth remembering. */
const MAX_LEARNT = 64;
const LEARNT_TTL_MS = 15 * 60_000;
const MIN_LEARNT_CHARS = 5;

/** A quoted command-line value without its quotes. */
function unquote(v: string): string {
  return v.length >= 2 && (v[0] === "'" || v[0] === '"') && v.endsWith(v[0]) ? v.slice(1, -1) : v;
}

/**
 * Builds a redactor. `secrets` are exact values (the admin PIN) scrubbed from every string;
 * `maxChars` bounds each string.
 */
export function createRedactor(secrets: readonly string[], maxChars: number): Redactor {
  const exact = secrets.filter((s) => s.length > 0).flatMap((s) => [s, jsonQuoted(s)]);
  exact.sort((a, b) => b.length - a.length);

  // Free-form secrets seen in one record (a tool call's input) are scrubbed from the next ones (its
  // output): newest last, bounded, forgotten after a while. Only in memory, like the values themselves.
  const learnt = new Map<string, number>();
  const learn = (raw: string) => {
    const v = unquote(raw.trim());
    if (v.length < MIN_LEARNT_CHARS || v.length > 1024 || v.includes(REDACTED) || REDACTED.includes(v)) return;
    learnt.delete(v);
    learnt.set(v, Date.now() + LEARNT_TTL_MS);
    if (learnt.size > MAX_LEARNT) learnt.delete(learnt.keys().next().value!);
  };
  const scrubLearnt = (input: string): string => {
    if (learnt.size === 0) return input;
    const now = Date.now();
    let s = input;
    for (const [v, until] of learnt) {
      if (until <= now) learnt.delete(v);
      else if (s.includes(v)) s = s.split(v).join(REDACTED);
    }
    return s;
  };

  // A large text seen again (a re-read of an unchanged file) is not scanned again: the rules are
  // a pure function of the text. The result is often the input itself, which then costs no bytes.
  const large = new LargeStringMemo<string>(2 * 1024 * 1024, 4);
  const text = (input: string): string => {
    if (input.length < LARGE_STRING_CHARS) return bound(scrubLearnt(scrub(input)));
    let s = large.get(input);
    if (s === undefined) {
      s = scrub(input);
      large.set(input, s, s === input ? 0 : stringBytes(s));
    }
    return bound(scrubLearnt(s));
  };

  const bound = (s: string): string =>
    s.length > maxChars ? `${s.slice(0, maxChars)}…<truncated ${s.length - maxChars} chars>` : s;

  const scrub = (input: string): string => {
    let s = input;
    for (const secret of exact) if (s.includes(secret)) s = s.split(secret).join(REDACTED);
    const found = findSecrets(s);
    for (const f of found) if (f.rule.freeForm) learn(f.secret);
    s = replaceSecrets(s, REDACTED, found);
    for (const rule of TEXT_RULES)
      if (!rule.needle || s.includes(rule.needle)) s = s.replace(rule.re, rule.rep as string);
    return redactPairs(s, learn);
  };

  const walk = (v: unknown, depth: number, seen: Set<object>): unknown => {
    if (v === null || typeof v === "boolean") return v;
    if (typeof v === "number") return Number.isFinite(v) ? v : String(v);
    if (typeof v === "bigint") return v.toString();
    if (typeof v === "string") return text(v);
    if (typeof v === "undefined" || typeof v === "function" || typeof v === "symbol") return null;
    if (v instanceof Uint8Array) {
      return { [BINARY_KEY]: { bytes: v.byteLength, sha256: new Bun.CryptoHasher("sha256").update(v).digest("hex") } };
    }
    if (v instanceof Error) return { type: v.name, message: text(v.message) };
    const obj = v as object;
    if (seen.has(obj)) return { [CYCLE_KEY]: Array.isArray(obj) ? "array" : "object" };
    if (depth >= MAX_DEPTH)
      return {
        [TRUNCATED_KEY]: { reason: "depth_limit", max_depth: MAX_DEPTH, type: Array.isArray(obj) ? "array" : "object" },
      };
    seen.add(obj);
    try {
      if (Array.isArray(obj)) {
        const out: unknown[] = [];
        let redactNext = false;
        for (const item of obj.slice(0, MAX_ITEMS)) {
          if (redactNext) {
            out.push(REDACTED);
            redactNext = false;
            continue;
          }
          if (typeof item === "string" && FLAG.test(item)) redactNext = true;
          out.push(walk(item, depth + 1, seen));
        }
        if (obj.length > MAX_ITEMS)
          out.push({ [TRUNCATED_KEY]: { reason: "item_limit", retained: MAX_ITEMS, omitted: obj.length - MAX_ITEMS } });
        return out;
      }
      const entries = Object.entries(obj);
      const out: Record<string, unknown> = {};
      // A credential split into a pair record: {"name": "API_TOKEN", "value": "..."} (env lists, headers).
      const named = (obj as Record<string, unknown>).name ?? (obj as Record<string, unknown>).key;
      const pairSecret = typeof named === "string" && isSensitiveKey(named);
      for (const [rawKey, item] of entries.slice(0, MAX_ITEMS)) {
        let key = rawKey.length > MAX_KEY_CHARS ? rawKey.slice(0, MAX_KEY_CHARS) : rawKey;
        for (let n = 2; key in out; n++) key = `${rawKey.slice(0, MAX_KEY_CHARS)}#${n}`;
        const sensitive = isSensitiveKey(rawKey) || (pairSecret && rawKey === "value");
        if (sensitive && typeof item === "string") learn(item);
        out[key] =
          sensitive && item !== null && item !== undefined && item !== "" ? REDACTED : walk(item, depth + 1, seen);
      }
      if (entries.length > MAX_ITEMS)
        out[TRUNCATED_KEY] = { reason: "item_limit", retained: MAX_ITEMS, omitted: entries.length - MAX_ITEMS };
      return out;
    } finally {
      seen.delete(obj);
    }
  };

  return { text, value: (v) => walk(v, 0, new Set()) };
}

/** A small preview of a sanitised value: depth 4, 20 items, 512 chars per string. */
export function preview(v: unknown, depth = 0): unknown {
  if (typeof v === "string") return v.length > 512 ? `${v.slice(0, 512)}…` : v;
  if (v === null || typeof v !== "object") return v;
  if (depth >= 4) return Array.isArray(v) ? `[${v.length} items]` : "{…}";
  if (Array.isArray(v)) return v.slice(0, 20).map((x) => preview(x, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v).slice(0, 20)) out[k] = preview(x, depth + 1);
  return out;
}
