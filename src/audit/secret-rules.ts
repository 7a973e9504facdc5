/**
 * The rule set of secret patterns that both the audit redaction (redact.ts) and the `secret_scan`
 * tool use, in the shape secret scanners publish theirs (gitleaks, for one): a stable id, keywords
 * that must occur for the rule to be tried at all, a regex, the group that holds the secret, and
 * optional checks on the secret (entropy, character classes). The rules are written for this
 * project; each has its own test (test/audit/secret-rules.test.ts). Keep the order specific to
 * generic: `secret_scan` reports a line under the first rule that finds a real value in it.
 *
 * Every regex is bounded (no nested unbounded repetition), so a large text costs linear time.
 */

export interface SecretRule {
  /** Stable id; `secret_scan` reports it as a finding's `type`. */
  id: string;
  description: string;
  /** Lowercase substrings of which the text must contain one before the regex runs (none: always). */
  keywords: readonly string[];
  /** Must carry the `g` and `d` flags (every match, with group indices). */
  regex: RegExp;
  /** The group holding the secret; 0 is the whole match. */
  group: number;
  /** Least Shannon entropy (bits per character) the secret must have. */
  entropy?: number;
  /** Further check on the secret. */
  accept?: (secret: string) => boolean;
  /** The value is free-form (a password after a flag, say): learnt so its echo elsewhere is scrubbed too. */
  freeForm?: boolean;
}

/** A value of a command-line flag: quoted (may hold spaces) or one word. */
const ARG = `'[^'\\n]{1,512}'|"[^"\\n]{1,512}"|[^\\s'"][^\\s]{0,511}`;
/** The rest of one shell command before the flag (bounded, never past a command separator). */
const SAME_COMMAND = `[^\\n;|&]{0,400}?`;

/** Shannon entropy of `s` in bits per character. */
export function entropy(s: string): number {
  if (s.length === 0) return 0;
  const counts = new Map<string, number>();
  for (const c of s) counts.set(c, (counts.get(c) ?? 0) + 1);
  let h = 0;
  for (const n of counts.values()) {
    const p = n / s.length;
    h -= p * Math.log2(p);
  }
  return h;
}

const mixedCase = (s: string) => /[a-z]/.test(s) && /[A-Z]/.test(s) && /[0-9]/.test(s);

/** A long pattern is written as parts, joined in order (each part's flags count for the whole). */
const rule = (r: Omit<SecretRule, "regex"> & { regex: RegExp | RegExp[] }): SecretRule => {
  const parts = Array.isArray(r.regex) ? r.regex : [r.regex];
  const flags = new Set(parts.flatMap((p) => p.flags.split("")));
  flags.add("g");
  flags.add("d");
  return { ...r, regex: new RegExp(parts.map((p) => p.source).join(""), [...flags].join("")) };
};

export const SECRET_RULES: readonly SecretRule[] = [
  rule({
    id: "private_key",
    description: "A PEM or OpenSSH private key block (the whole block, or the header and the base64 after it)",
    keywords: ["private key"],
    regex: [
      /-----BEGIN[ A-Z0-9_-]{0,64}PRIVATE KEY(?: BLOCK)?-----/,
      /(?:[\s\S]{0,16384}?-----END[ A-Z0-9_-]{0,64}PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,-]{0,16384})/,
    ],
    group: 0,
  }),
  rule({
    id: "aws_access_key",
    description: "An AWS access key id (long-term AKIA, temporary ASIA and the other principal prefixes)",
    keywords: ["akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "a3t"],
    regex: /\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[0-9A-Z]{16}\b/,
    group: 0,
  }),
  rule({
    id: "aws_secret_key",
    description: "An AWS secret access key named as such (aws_secret_access_key = …, AWS_SECRET_KEY: …)",
    keywords: ["aws", "secret_access"],
    regex: [
      /(?:aws|secret_access)[\w.-]{0,30}(?:secret|key)[\w.-]{0,20}/i,
      /["']?\s{0,5}[:=]\s{0,5}["']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])/i,
    ],
    group: 1,
  }),
  rule({
    id: "anthropic_key",
    description: "An Anthropic API key",
    keywords: ["sk-ant-"],
    regex: /\bsk-ant-[A-Za-z0-9_-]{20,300}/,
    group: 0,
  }),
  rule({
    id: "openai_key",
    description: "An OpenAI-style API key (sk-, sk-proj-, sk-svcacct-)",
    keywords: ["sk-"],
    regex: /\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,300}/,
    group: 0,
  }),
  rule({
    id: "github_token",
    description: "A GitHub token (classic ghp_/gho_/ghu_/ghs_/ghr_ or a fine-grained github_pat_)",
    keywords: ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    regex: /\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})/,
    group: 0,
  }),
  rule({
    id: "gitlab_token",
    description: "A GitLab token (personal, pipeline trigger, deploy, runner, feed, OAuth app secret …)",
    keywords: ["glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "gloas-", "glsoat-", "glft-", "glimt-", "glagent-"],
    regex: /\bgl(?:pat|ptt|dt|rt|cbt|oas|soat|ft|imt|agent)-[A-Za-z0-9_-]{20,255}/,
    group: 0,
  }),
  rule({
    id: "slack_token",
    description: "A Slack bot, user, app, refresh or configuration token (xoxb-, xoxp-, xapp- …)",
    keywords: ["xox", "xapp-"],
    regex: [
      /\bxox[abeoprs]-(?:\d{1,20}-)?[A-Za-z0-9-]{10,250}/,
      /|\bxoxe\.xox[bp]-\d-[A-Za-z0-9]{20,250}/,
      /|\bxapp-\d-[A-Za-z0-9]{8,20}-\d{6,20}-[a-z0-9]{20,100}/,
    ],
    group: 0,
  }),
  rule({
    id: "slack_webhook",
    description: "A Slack incoming webhook or workflow URL",
    keywords: ["hooks.slack.com"],
    regex: /hooks\.slack\.com\/(?:services|workflows|triggers)\/[A-Za-z0-9+/_-]{20,200}/,
    group: 0,
  }),
  rule({
    id: "stripe_key",
    description: "A Stripe secret or restricted key",
    keywords: ["sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk_prod_", "rk_prod_"],
    regex: /\b[rs]k_(?:live|test|prod)_[A-Za-z0-9]{10,250}\b/,
    group: 0,
  }),
  rule({
    id: "google_api_key",
    description: "A Google API key",
    keywords: ["aiza"],
    regex: /\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])/,
    group: 0,
  }),
  rule({
    id: "npm_token",
    description: "An npm access token",
    keywords: ["npm_"],
    regex: /\bnpm_[A-Za-z0-9]{36}\b/,
    group: 0,
  }),
  rule({
    id: "pypi_token",
    description: "A PyPI upload token",
    keywords: ["pypi-ageichlwas5vcmc"],
    regex: /\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,1000}/,
    group: 0,
  }),
  rule({
    id: "huggingface_token",
    description: "A Hugging Face access token",
    keywords: ["hf_"],
    regex: /\bhf_[A-Za-z0-9]{30,40}\b/,
    group: 0,
  }),
  rule({
    id: "sendgrid_key",
    description: "A SendGrid API key",
    keywords: ["sg."],
    regex: /\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])/,
    group: 0,
  }),
  rule({
    id: "twilio_key",
    description: "A Twilio API key sid",
    // "sk" occurs in too many words to narrow anything; the regex itself is cheap.
    keywords: [],
    regex: /\bSK[0-9a-fA-F]{32}\b/,
    group: 0,
  }),
  rule({
    id: "digitalocean_token",
    description: "A DigitalOcean personal, OAuth or refresh token",
    keywords: ["dop_v1_", "doo_v1_", "dor_v1_"],
    regex: /\bdo[opr]_v1_[a-f0-9]{64}\b/,
    group: 0,
  }),
  rule({
    id: "vault_token",
    description: "A HashiCorp Vault service or batch token",
    keywords: ["hvs.", "hvb."],
    regex: /\bhv[sb]\.[A-Za-z0-9_-]{24,300}/,
    group: 0,
  }),
  rule({
    id: "shopify_token",
    description: "A Shopify access token or shared secret",
    keywords: ["shpat_", "shpca_", "shppa_", "shpss_"],
    regex: /\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b/,
    group: 0,
  }),
  rule({
    id: "telegram_bot_token",
    description: "A Telegram bot token",
    keywords: [":aa"],
    regex: /\b\d{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])/,
    group: 0,
  }),
  rule({
    id: "age_secret_key",
    description: "An age encryption secret key",
    keywords: ["age-secret-key-1"],
    regex: /AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}/,
    group: 0,
  }),
  rule({
    id: "databricks_token",
    description: "A Databricks personal access token",
    keywords: ["dapi"],
    regex: /\bdapi[a-f0-9]{32}(?:-\d)?\b/,
    group: 0,
  }),
  rule({
    id: "lsm_worker_token",
    description: "This project's remote-worker invite or worker token",
    keywords: ["lsmcp_"],
    regex: /\blsmcp_(?:inv|wk)_[A-Za-z0-9_-]{16,200}/,
    group: 0,
  }),
  rule({
    id: "jwt",
    description: "A JSON Web Token (header.payload.signature, base64url)",
    keywords: ["eyj"],
    regex: /\beyJ[A-Za-z0-9_-]{8,4096}\.[A-Za-z0-9_-]{8,16384}\.[A-Za-z0-9_-]{8,4096}/,
    group: 0,
  }),
  rule({
    id: "mysql_password",
    description:
      "A MySQL/MariaDB client password given on the command line, -p<password> (attached, quoted, after other flags)",
    keywords: ["mysql", "mariadb"],
    regex: new RegExp(`\\b(?:mysql|mariadb)[\\w-]{0,12}\\b${SAME_COMMAND}\\s-p(${ARG})`),
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "sshpass_password",
    description: "A password handed to sshpass with -p (attached or as the next word)",
    keywords: ["sshpass"],
    regex: new RegExp(`\\bsshpass\\b${SAME_COMMAND}\\s-p\\s{0,5}(${ARG})`),
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "redis_password",
    description: "A password handed to redis-cli with -a",
    keywords: ["redis-cli"],
    regex: new RegExp(`\\bredis-cli\\b${SAME_COMMAND}\\s-a\\s{1,5}(${ARG})`),
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "curl_credentials",
    description: "user:password handed to curl or wget (-u, --user, --password=)",
    keywords: ["curl", "wget"],
    regex: new RegExp(
      `\\b(?:curl|wget)\\b${SAME_COMMAND}\\s(?:-u\\s{0,5}|--user[= ]\\s{0,5}|--(?:http-)?password[= ]\\s{0,5})(${ARG})`,
    ),
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "url_password",
    description: "A password in a URL's userinfo (scheme://user:password@host)",
    keywords: ["://"],
    regex: /\b[a-z][a-z0-9+.-]{0,30}:\/\/[^\s:/@"'<>]{0,256}:([^\s@/"'<>]{3,256})@[^\s"'<>]/i,
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "generic_assignment",
    description: "A quoted value assigned to a name that says token, secret, password or key",
    keywords: [
      "token",
      "secret",
      "password",
      "passwd",
      "pwd",
      "api_key",
      "api-key",
      "apikey",
      "access_key",
      "access-key",
      "accesskey",
      "client_secret",
    ],
    regex: [
      /(?:token|secret|password|passwd|pwd|api[_-]?key|access[_-]?key|client[_-]?secret)\w{0,40}/i,
      /["']?\s{0,5}[:=]\s{0,5}["']([^"'\s]{8,512})["']/i,
    ],
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "dotenv_assignment",
    description: "A dotenv or shell line NAME=value whose NAME says token, secret, password or key",
    keywords: ["token", "secret", "password", "passwd", "api_key", "apikey", "access_key", "private_key"],
    regex: [
      /^[ \t]{0,20}(?:export[ \t]{1,5})?[A-Z0-9_]{0,60}/m,
      /(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]{0,60}/m,
      /[ \t]{0,5}=[ \t]{0,5}["']?([^"'\s#;&|`]{8,512})/m,
    ],
    group: 1,
    freeForm: true,
  }),
  rule({
    id: "aws_secret_key_bare",
    description: "A bare 40-character AWS-style secret key: mixed case and digits, high entropy, nothing around it",
    keywords: [],
    regex: /(?<![A-Za-z0-9/+=])([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])/,
    group: 1,
    entropy: 4.2,
    accept: mixedCase,
  }),
];

/** One secret found in a text: the rule, and where the secret lies. */
export interface SecretMatch {
  rule: SecretRule;
  start: number;
  end: number;
  secret: string;
}

/**
 * Every secret the rules find in `text`, in order of position. A rule runs only when one of its
 * keywords occurs (case-insensitively) in the text. Matches may overlap (two rules on one token).
 */
export function findSecrets(text: string, rules: readonly SecretRule[] = SECRET_RULES): SecretMatch[] {
  const present = keywordsIn(text, rules);
  const out: SecretMatch[] = [];
  for (const r of rules) {
    if (r.keywords.length > 0 && !r.keywords.some((k) => present.has(k))) continue;
    r.regex.lastIndex = 0;
    for (let m = r.regex.exec(text); m !== null; m = r.regex.exec(text)) {
      if (m[0].length === 0) r.regex.lastIndex++;
      const span = m.indices?.[r.group];
      const secret = m[r.group];
      if (!span || secret === undefined || secret.length === 0) continue;
      if (r.entropy !== undefined && entropy(secret) < r.entropy) continue;
      if (r.accept && !r.accept(secret)) continue;
      out.push({ rule: r, start: span[0], end: span[1], secret });
    }
  }
  return out.sort((a, b) => a.start - b.start || b.end - a.end);
}

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const keywordScanners = new WeakMap<readonly SecretRule[], { re: RegExp; all: string[]; longest: number }>();

/**
 * The rules' keywords that occur in `text`, found in one pass of one regex: a large text is read
 * once instead of once per keyword. Around each hit every keyword is tried, so one that starts
 * inside another's hit is not missed.
 */
function keywordsIn(text: string, rules: readonly SecretRule[]): Set<string> {
  let scanner = keywordScanners.get(rules);
  if (!scanner) {
    const all = [...new Set(rules.flatMap((r) => r.keywords))].sort((a, b) => b.length - a.length);
    scanner = {
      re: new RegExp(all.length ? all.map(escapeRegex).join("|") : "(?!)", "gi"),
      all,
      longest: all[0]?.length ?? 0,
    };
    keywordScanners.set(rules, scanner);
  }
  const found = new Set<string>();
  const { re, all, longest } = scanner;
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null && found.size < all.length; m = re.exec(text)) {
    const around = text.slice(m.index, m.index + m[0].length + longest).toLowerCase();
    for (const k of all) if (!found.has(k) && around.includes(k)) found.add(k);
  }
  return found;
}

/** Replaces every secret the rules find with `replacement` (overlapping finds merged into one). */
export function replaceSecrets(text: string, replacement: string, found: SecretMatch[] = findSecrets(text)): string {
  if (found.length === 0) return text;
  let out = "";
  let last = 0;
  for (const f of found) {
    if (f.end <= last) continue;
    out += text.slice(last, Math.max(last, f.start)) + (f.start >= last ? replacement : "");
    last = f.end;
  }
  return out + text.slice(last);
}
