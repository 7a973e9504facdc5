import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AuditLog } from "../../src/audit/log.ts";
import { asPayloadRef } from "../../src/audit/payloads.ts";
import { coalesce, query } from "../../src/audit/query.ts";
import { createRedactor, REDACTED } from "../../src/audit/redact.ts";
import { loadSettings } from "../../src/config/load.ts";
import { tempDir } from "../helpers/harness.ts";

function settings(state: string, flags: Record<string, string> = {}) {
  return loadSettings({
    env: {},
    flags: { workspace_root: state, state_dir: join(state, "state"), oauth_admin_pin: "pin-secret-1234", ...flags },
  });
}

describe("redaction", () => {
  const r = createRedactor(["pin-secret-1234"], 16_000);
  test.each([
    ["Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"],
    ["curl -H 'x' https://u:hunter22@example.com/a?token=zzz123", "hunter22"],
    ["see https://example.com/a?sig=qqq999", "qqq999"],
    ["mytool --api-key=KEY998877 run", "KEY998877"],
    ["mytool --password s3cr3tpw run", "s3cr3tpw"],
    [`export GH=ghp_${"x".repeat(36)}`, `ghp_${"x".repeat(36)}`],
    ["AKIAABCDEFGHIJKLMNOP here", "AKIAABCDEFGHIJKLMNOP"],
    // API keys of the sk- family, bare in text (no flag or name beside them to give them away).
    ["use sk-proj-Ab12Cd34Ef56Gh78Ij90 now", "sk-proj-Ab12Cd34Ef56Gh78Ij90"],
    // Remote worker invites and worker tokens.
    [`join lsmcp_inv_${"Q7w".repeat(11)} then`, `lsmcp_inv_${"Q7w".repeat(11)}`],
    [`worker lsmcp_wk_${"Zx9-".repeat(8)} ok`, `lsmcp_wk_${"Zx9-".repeat(8)}`],
    ["the pin is pin-secret-1234 ok", "pin-secret-1234"],
    ["link http://h/download/AbCdEfGhIjKlMnOp", "AbCdEfGhIjKlMnOp"],
    ['{"client_secret": "abc-def-ghi"}', "abc-def-ghi"],
    ["redis://:redispw9911@localhost:6379/0", "redispw9911"],
    ["postgres://app:p@ssw0rd77@db.internal/app", "ssw0rd77"],
    ["git clone https://abcdefghijklmnopqrstuvwxyz0123@git.example.com/r.git", "abcdefghijklmnopqrstuvwxyz0123"],
    ["mysql --password 'two words99' -h db", "words99"],
    ['tool --token="spaced tok3n" next', "tok3n"],
    ['{"password": "a\\"escaped-tail77"}', "escaped-tail77"],
  ])("scrubs %s", (input, secret) => {
    expect(r.text(input)).not.toContain(secret);
  });

  test("name/value pair records whose name is a credential", () => {
    const v = r.value({
      env: [
        { name: "DB_PASSWORD", value: "pairpw123" },
        { name: "PORT", value: "5432" },
      ],
      headers: [{ key: "X-Api-Key", value: "hdrkey456" }],
    });
    expect(JSON.stringify(v)).not.toContain("pairpw123");
    expect(JSON.stringify(v)).not.toContain("hdrkey456");
    expect(JSON.stringify(v)).toContain("5432");
  });

  test("keys, flag lists, bounds, binaries and cycles", () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    const v = r.value({
      access_token: "t0k3n",
      token_sha256: "keepme",
      nested: { Password: "pw", fine: "ok" },
      argv: ["tool", "--token", "TTT", "next"],
      bytes: new Uint8Array([1, 2, 3]),
      cyclic,
      wide: Array.from({ length: 300 }, (_, i) => i),
    }) as Record<string, unknown>;
    expect(v.access_token).toBe(REDACTED);
    expect(v.token_sha256).toBe("keepme");
    expect(v.nested).toEqual({ Password: REDACTED, fine: "ok" });
    expect(v.argv).toEqual(["tool", "--token", REDACTED, "next"]);
    expect(JSON.stringify(v.bytes)).toContain("$local_shell_mcp_audit_binary");
    expect(JSON.stringify(v.cyclic)).toContain("$local_shell_mcp_audit_cycle");
    expect((v.wide as unknown[]).length).toBe(201);
    const long = createRedactor([], 20).text("y".repeat(100));
    expect(long).toContain("truncated 80 chars");
  });
});

describe("audit log file", () => {
  test("payload round trip, corrupt and missing payloads report a status only", async () => {
    using dir = tempDir();
    const log = new AuditLog(settings(dir.path, { audit_inline_value_bytes: "256" }));
    const big = { lines: Array.from({ length: 200 }, (_, i) => `line ${i}`) };
    log.record("tool_call_end", { call_id: "c1", tool: "bash", ok: true, output: big });
    await log.flush();
    const rec = JSON.parse(readFileSync(log.file, "utf8").trim()) as Record<string, unknown>;
    const ref = asPayloadRef(rec.output)!;
    expect(ref).toBeDefined();
    expect(log.payloads.resolve(ref, Date.now() / 1000)).toEqual({ status: "ok", value: big });
    const path = join(log.payloads.dir, `${ref.sha256}.json.gz`);
    writeFileSync(path, "garbage");
    expect(log.payloads.resolve(ref, Date.now() / 1000)).toEqual({ status: "corrupt" });
    expect(log.payloads.resolve({ ...ref, sha256: "0".repeat(64) }, Date.now() / 1000)).toEqual({ status: "missing" });
    expect(log.payloads.resolve(ref, Date.now() / 1000 + 8 * 86_400)).toEqual({ status: "expired" });
  });

  test("retention rewrites to the newest units and never splits a tool-call pair", async () => {
    using dir = tempDir();
    const log = new AuditLog(settings(dir.path, { max_audit_log_bytes: "20000", max_audit_event_bytes: "4000" }));
    for (let i = 0; i < 200; i++) {
      log.record("tool_call_start", { call_id: `c${i}`, tool: "bash", input: { n: i, pad: "p".repeat(100) } });
      log.record("other_event", { n: i });
      log.record("tool_call_end", { call_id: `c${i}`, tool: "bash", ok: true, output: { n: i } });
      if (i % 20 === 0) await log.flush();
    }
    await log.flush();
    const text = readFileSync(log.file, "utf8");
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(20_000);
    const recs = text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { event: string; call_id?: string });
    const starts = new Set(recs.filter((r) => r.event === "tool_call_start").map((r) => r.call_id));
    const ends = new Set(recs.filter((r) => r.event === "tool_call_end").map((r) => r.call_id));
    expect(starts.size).toBeGreaterThan(5);
    expect([...starts].sort()).toEqual([...ends].sort());
    expect(starts.has("c199")).toBe(true);
    expect(starts.has("c0")).toBe(false);
  });

  test("concurrent writers (two logs on one dir) never interleave lines", async () => {
    using dir = tempDir();
    const s = settings(dir.path);
    const a = new AuditLog(s);
    const b = new AuditLog(s);
    for (let i = 0; i < 500; i++) {
      a.record("a_event", { i, pad: "a".repeat(500) });
      b.record("b_event", { i, pad: "b".repeat(500) });
    }
    await Promise.all([a.flush(), b.flush()]);
    const lines = readFileSync(a.file, "utf8").trim().split("\n");
    expect(lines.length).toBe(1000);
    for (const l of lines) JSON.parse(l);
  });

  test("oversize events shrink to identity fields with a marker; tail reads a bounded window", async () => {
    using dir = tempDir();
    const log = new AuditLog(settings(dir.path, { max_audit_event_bytes: "600", audit_payloads_enabled: "false" }));
    log.record("tool_call_start", { call_id: "big", tool: "bash", input: { text: "z".repeat(5000) } });
    for (let i = 0; i < 100; i++) log.record("filler", { i });
    const lines = await log.tail(2000);
    expect(lines.length).toBeLessThan(101);
    const all = await log.tail(10_000_000);
    const first = JSON.parse(all[0]!) as Record<string, unknown>;
    expect(first.call_id).toBe("big");
    expect(JSON.stringify(first)).toContain("event_byte_limit");
  });
});

describe("coalescing and query", () => {
  const line = (o: Record<string, unknown>) => JSON.stringify(o);
  const lines = [
    line({ id: "1", ts: 1, event: "tool_call_start", call_id: "a", tool: "bash", session: "S1", input: {} }),
    line({ id: "2", ts: 2, event: "auth_ok", path: "/mcp" }),
    line({
      id: "3",
      ts: 3,
      event: "tool_call_end",
      call_id: "a",
      tool: "bash",
      session: "S1",
      ok: false,
      error: { type: "x" },
    }),
    line({ id: "4", ts: 4, event: "oauth_token_issued", client_id: "c" }),
    line({ id: "5", ts: 5, event: "tool_call_start", call_id: "self", tool: "audit_tail", session: "S1" }),
    "not json",
  ];
  test("pairs merge, auth_ok hides, the own call is excluded, filters apply", () => {
    const rows = coalesce(lines, "self");
    expect(rows.map((r) => r.id)).toEqual(["call:a", "4"]);
    expect(rows[0]!.status).toBe("failed");
    const sec = query(rows, { limit: 10, operation: "security", sort: "desc" });
    expect(sec.entries.map((e) => e.event)).toEqual(["oauth_token_issued"]);
    const s1 = query(rows, { limit: 10, session: "S1", sort: "asc" });
    expect(s1.count).toBe(1);
    expect(s1.failed_matched).toBe(1);
    expect(() => query(rows, { limit: 1, startTs: 5, endTs: 1, sort: "asc" })).toThrow();
  });
});
