import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "audit-pin-55102";
const FAKE_GH = `ghp_${"A1b2C3d4".repeat(5)}`;
const FAKE_SK = `sk-proj-${"Q1w2E3r4".repeat(3)}`;

let dir: TempDir;
let server: HttpServer;
let token: string;
let mcp: McpHandle;
let sid: string;

function walk(path: string): string[] {
  const st = statSync(path);
  if (!st.isDirectory()) return [path];
  return readdirSync(path).flatMap((n) => walk(join(path, n)));
}

beforeAll(async () => {
  dir = tempDir();
  // A small inline limit so a modest command output goes to the payload store.
  server = await startHttpServer(
    { workspace: dir.path, state: join(dir.path, "state"), args: ["--audit-inline-value-bytes", "1024"] },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  token = (await obtainToken(server.url, PIN, "shell:read shell:write shell:execute audit:read audit:full")).token;
  mcp = await connectHttp(server.url, { authorization: `Bearer ${token}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});

afterAll(async () => {
  await mcp?.close();
  await server?.stop();
  dir?.[Symbol.dispose]();
});

type Tail = { entries: Array<Record<string, unknown>>; count: number; total_matched: number };

describe("audit log and audit_tail", () => {
  test("tool calls are one coalesced row with the principal; secrets in inputs are redacted", async () => {
    await mcp.ok("bash", { session_id: sid, command: `echo --token=${FAKE_GH} done` });
    // Bare in the command, with nothing beside it that names it a secret.
    await mcp.ok("bash", { session_id: sid, command: `echo ${FAKE_SK} done` });
    const tail = await mcp.ok<Tail>("audit_tail", { session_id: sid, event: "tool_call", limit: 10 });
    const row = tail.entries.find((e) => e.tool === "bash")!;
    expect(row.status).toBe("success");
    expect(row.paired).toBe(true);
    expect(row.session).toBe(sid);
    expect((row.principal as { subject: string }).subject).toBe("local-user");
    expect(JSON.stringify(row)).not.toContain(FAKE_GH);
    const bare = tail.entries.find((e) => e.tool === "bash" && JSON.stringify(e).includes("<redacted> done"));
    expect(bare, "the bash call with the sk- key, redacted").toBeDefined();
    expect(JSON.stringify(tail.entries)).not.toContain(FAKE_SK);
    expect(readFileSync(join(dir.path, "state", "audit_log", "audit.jsonl"), "utf8")).not.toContain(FAKE_SK);
    // The current audit_tail call itself is left out, earlier ones are not.
    expect(tail.entries.some((e) => e.tool === "audit_tail")).toBe(false);
    const again = await mcp.ok<Tail>("audit_tail", { session_id: sid, event: "tool_call", limit: 10 });
    expect(again.entries.some((e) => e.tool === "audit_tail")).toBe(true);
  });

  test("large values go to the payload store; the full entry needs entry_id and comes back intact", async () => {
    const out = await mcp.ok<{ output?: string; stdout?: string }>("bash", { session_id: sid, command: "seq 1 3000" });
    const tail = await mcp.ok<Tail>("audit_tail", { session_id: sid, search: "bash", limit: 1 });
    const row = tail.entries[0]!;
    expect(JSON.stringify(row.output)).toContain("$local_shell_mcp_audit_payload");
    const needsId = await mcp.call("audit_tail", { session_id: sid, include_full_payloads: true });
    expect(needsId.isError).toBe(true);
    const full = await mcp.ok<Tail>("audit_tail", {
      session_id: sid,
      entry_id: row.id as string,
      include_full_payloads: true,
    });
    expect(full.entries[0]!.output).toEqual(JSON.parse(JSON.stringify(out)));
    const payloads = readdirSync(join(dir.path, "state", "audit_log", "payloads"));
    expect(payloads.some((n) => /^[0-9a-f]{64}\.json\.gz$/.test(n))).toBe(true);
  });

  test("audit_tail filters by audit_session and operation; auth events appear, auth_ok is hidden", async () => {
    const other = await mcp.ok<Tail>("audit_tail", { session_id: sid, audit_session: "ZZZZZZZZ" });
    expect(other.count).toBe(0);
    const mine = await mcp.ok<Tail>("audit_tail", { session_id: sid, audit_session: sid, limit: 200 });
    expect(mine.count).toBeGreaterThan(0);
    expect(mine.entries.every((e) => e.session === sid)).toBe(true);
    const security = await mcp.ok<Tail>("audit_tail", {
      session_id: sid,
      operation: "security",
      limit: 200,
      sort: "asc",
    });
    const events = new Set(security.entries.map((e) => e.event));
    for (const e of ["oauth_client_registered", "oauth_client_approved", "oauth_code_issued", "oauth_token_issued"])
      expect(events.has(e)).toBe(true);
    expect(events.has("auth_ok")).toBe(false);
    expect(await mcp.fails("audit_tail", { session_id: sid, entry_id: "nope" })).toBe("audit_entry_not_found");
  });

  test(
    "each event kind is on disk; no file under the state " + "dir (other than the signing key) holds a secret",
    async () => {
      await fetch(`${server.url}/mcp`, {
        method: "POST",
        body: "{}",
        headers: { "content-type": "application/json", authorization: "Bearer bogus.token.value" },
      });
      await fetch(`${server.url}/oauth/token`, { method: "POST", body: "x".repeat(17_000_000) });
      await mcp.ok("version");
      await server.stop();
      const state = join(dir.path, "state");
      const log = readFileSync(join(state, "audit_log", "audit.jsonl"), "utf8");
      for (const e of [
        "tool_call_start",
        "tool_call_end",
        "oauth_client_registered",
        "oauth_client_approved",
        "oauth_code_issued",
        "oauth_token_issued",
        "oauth_auth_failed",
        "auth_ok",
        "http_request_rejected",
      ]) {
        expect(log).toContain(`"event":"${e}"`);
      }
      const secret = readFileSync(join(state, "oauth-jwt-secret"), "utf8").trim();
      for (const file of walk(state)) {
        if (file.endsWith("oauth-jwt-secret")) continue;
        const bytes = readFileSync(file);
        const text = file.endsWith(".gz") ? Buffer.from(Bun.gunzipSync(bytes)).toString() : bytes.toString("latin1");
        expect(text).not.toContain(token);
        expect(text).not.toContain(token.split(".")[2]!);
        expect(text).not.toContain(PIN);
        expect(text).not.toContain(secret);
        expect(text).not.toContain(FAKE_GH);
        expect(statSync(file).mode & 0o077).toBe(0);
      }
    },
  );
});
