/**
 * The audit log after a run with 20+ secret forms, through the compiled binary: each form goes in
 * a real `bash` call (in the command, the env, or the output it prints), and afterwards neither the
 * log nor its payload files hold one of them verbatim. The secrets are made at run time.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { openStdioSession } from "../helpers/harness.ts";

function rnd(chars: string, n: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  return Array.from(bytes, (b) => chars[b % chars.length]).join("");
}
const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const HEX = "0123456789abcdef";
const word = (prefix: string) => `${prefix}${rnd(ALNUM, 10)}`;

interface Form {
  name: string;
  /** The secret that must not be stored. */
  secret: string;
  command: string;
  env?: Record<string, string>;
  /** The command prints the secret (so the output path is exercised too). */
  printed?: boolean;
}

function forms(): Form[] {
  const f: Form[] = [];
  const add = (name: string, secret: string, command: string, extra: Partial<Form> = {}) =>
    f.push({ name, secret, command, ...extra });
  let s = word("Att");
  add("mysql -p attached", s, `echo mysql -p${s} -e 'select 1'`, { printed: true });
  s = word("Quo");
  add("mysql -p quoted", s, `echo "mysql -u root -p'${s} x' app"`, { printed: true });
  s = word("Root");
  add("mysql -p after -u root", s, `mysql -u root -p${s} app 2>/dev/null || true`);
  s = word("Ssh");
  add("sshpass -p", s, `sshpass -p ${s} ssh nohost true 2>/dev/null || true`);
  s = `Ab1/${rnd(`${ALNUM}/+`, 36)}`;
  add("bare AWS secret key in output", s, `echo ${s}`, { printed: true });
  s = `xoxb-${rnd("0123456789", 12)}-${rnd("0123456789", 13)}-${rnd(ALNUM, 24)}`;
  add("bare xoxb- token in output", s, `printf '%s\\n' ${s}`, { printed: true });
  s = word("Env");
  add("env value echoed", s, `echo "value: $DB_PASS"`, { env: { DB_PASS: s }, printed: true });
  s = word("Exp");
  add("exported token echoed", s, `export SERVICE_TOKEN=${s}; echo "$SERVICE_TOKEN"`, { printed: true });
  s = `ghp_${rnd(ALNUM, 36)}`;
  add("GitHub token", s, `echo ${s}`, { printed: true });
  s = `AKIA${rnd("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)}`;
  add("AWS access key id", s, `echo ${s}`, { printed: true });
  s = rnd(ALNUM, 64);
  add(
    "private key block",
    s,
    `printf '%s\\n' '-----BEGIN OPENSSH PRIVATE KEY-----' ${s} '-----END OPENSSH PRIVATE KEY-----'`,
    { printed: true },
  );
  s = `eyJ${rnd(ALNUM, 20)}.eyJ${rnd(ALNUM, 30)}.${rnd(ALNUM, 30)}`;
  add("JWT", s, `echo ${s}`, { printed: true });
  s = word("Url");
  add("URL password", s, `echo postgres://app:${s}@db/app`, { printed: true });
  s = `sk_live_${rnd(ALNUM, 24)}`;
  add("Stripe key", s, `echo ${s}`, { printed: true });
  s = `AIza${rnd(ALNUM, 35)}`;
  add("Google API key", s, `echo ${s}`, { printed: true });
  s = `T${rnd(ALNUM, 8)}/B${rnd(ALNUM, 8)}/${rnd(ALNUM, 24)}`;
  add("Slack webhook", s, `echo https://hooks.slack.com/services/${s}`, { printed: true });
  s = word("Curl");
  add("curl -u user:password", s, `curl -s -u admin:${s} http://127.0.0.1:9/ 2>/dev/null || true`);
  s = word("Redis");
  add("redis-cli -a", s, `redis-cli -h 127.0.0.1 -p 9 -a ${s} ping 2>/dev/null || true`);
  s = word("Flag");
  add("--password=value", s, `echo --password=${s}`, { printed: true });
  s = word("Bearer");
  add("Authorization header", s, `echo "Authorization: Bearer ${s}"`, { printed: true });
  s = `sk-proj-${rnd(ALNUM, 40)}`;
  add("OpenAI key", s, `echo ${s}`, { printed: true });
  s = `npm_${rnd(ALNUM, 36)}`;
  add("npm token", s, `echo //registry.npmjs.org/:_authToken=${s}`, { printed: true });
  s = `dop_v1_${rnd(HEX, 64)}`;
  add("DigitalOcean token", s, `echo ${s}`, { printed: true });
  return f;
}

function auditText(state: string): string {
  const dir = join(state, "audit_log");
  let text = readFileSync(join(dir, "audit.jsonl"), "utf8");
  const payloads = join(dir, "payloads");
  if (existsSync(payloads))
    for (const n of readdirSync(payloads)) text += gunzipSync(readFileSync(join(payloads, n))).toString("utf8");
  return text;
}

describe("audit redaction through the binary", () => {
  test("after a run with 23 secret forms the audit log stores none of them verbatim", async () => {
    const all = forms();
    expect(all.length).toBeGreaterThanOrEqual(20);
    const s = await openStdioSession({ prefix: "lsm-audit-forms-" });
    try {
      for (const form of all) {
        const r = await s.mcp.ok<{ result: { stdout: string; exit_code: number } }>("bash", {
          session_id: s.sid,
          command: form.command,
          ...(form.env ? { env: form.env } : {}),
        });
        // The command really ran; where it prints the secret, the output path carries it.
        if (form.printed) expect(`${form.name}: ${r.result.stdout.includes(form.secret)}`).toBe(`${form.name}: true`);
      }
    } finally {
      // Closing the server flushes the audit writer.
      await s.mcp.close();
    }
    try {
      const text = auditText(s.state);
      const ends = text.split("\n").filter((l) => l.includes('"event":"tool_call_end"') && l.includes('"tool":"bash"'));
      expect(ends.length).toBe(all.length);
      const stored = all.filter((f) => text.includes(f.secret)).map((f) => f.name);
      console.log(`${all.length} secret forms, ${stored.length} stored verbatim`);
      expect(stored).toEqual([]);
      expect(text.split("<redacted>").length - 1).toBeGreaterThanOrEqual(all.length);
    } finally {
      await s.close();
    }
  }, 180_000);
});
