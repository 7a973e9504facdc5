/**
 * Item 7 of issue 9: a flood of registrations with distinct redirect URIs used to fill the pending
 * table and refuse every new client for up to 24 h. Now the oldest unapproved registrations give
 * way, approved clients are never evicted, and one peer address keeps at most 10 unused pending
 * registrations (issue 28: a refusal per address locked the operator out behind a tunnel).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connectHttp, startHttpServer, tempDir } from "../helpers/harness.ts";
import {
  approvalPage,
  authorizeRequest,
  callbackParams,
  discover,
  exchange,
  obtainToken,
  REDIRECT_URI,
  register,
  submitApproval,
  type Discovery,
} from "../oauth/flow.ts";

const PIN = "flood-pin-5521";

async function registerRaw(d: Discovery, redirectUri: string, name: string): Promise<Response> {
  return fetch(d.as.registration_endpoint!, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ redirect_uris: [redirectUri], client_name: name, token_endpoint_auth_method: "none" }),
  });
}

describe("OAuth registration flood", () => {
  test("300 distinct registrations evict the oldest pending ones; new and approved clients keep working", async () => {
    using dir = tempDir();
    const state = join(dir.path, "state");
    // The per-peer limit is off here so the flood reaches the table; the next test covers it.
    const server = await startHttpServer(
      { workspace: dir.path, state, args: ["--oauth-registration-rate-per-peer", "0"] },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const approved = await obtainToken(server.url, PIN, "shell:read");
      const d = await discover(server.url);
      const flood: string[] = [];
      for (let i = 0; i < 300; i++) {
        const r = await registerRaw(d, `https://attacker.example/cb/${i}`, `flood ${i}`);
        expect(r.status).toBe(201);
        flood.push(((await r.json()) as { client_id: string }).client_id);
      }
      // A newcomer after the flood is accepted, not refused for a day.
      const fresh = await registerRaw(d, "http://127.0.0.1:9/newcomer", "newcomer");
      expect(fresh.status).toBe(201);
      const freshId = ((await fresh.json()) as { client_id: string }).client_id;
      const page = async (clientId: string, redirectUri: string) => {
        const res = await approvalPage(
          d,
          await authorizeRequest(d, { client_id: clientId, redirect_uris: [redirectUri] } as never),
        );
        return { status: res.status, unknown: (await res.text()).includes("Unknown client_id") };
      };
      // The oldest flood entries were evicted (unknown client now), the newest survive.
      expect(await page(flood[0]!, "https://attacker.example/cb/0")).toEqual({ status: 400, unknown: true });
      expect(await page(flood[299]!, "https://attacker.example/cb/299")).toEqual({ status: 200, unknown: false });
      expect(await page(freshId, "http://127.0.0.1:9/newcomer")).toEqual({ status: 200, unknown: false });
      // The client approved before the flood is still known and still authorizes.
      expect(await page(approved.clientId, REDIRECT_URI)).toEqual({ status: 200, unknown: false });
      await server.stop();
      const log = readFileSync(join(state, "audit_log", "audit.jsonl"), "utf8");
      // 301 new pending clients into 256 places: 45 evictions, each audited.
      expect(log.match(/"event":"oauth_client_evicted"/g)?.length).toBe(45);
      expect(log).not.toContain(`"event":"oauth_client_evicted","client_id":"${approved.clientId}"`);
    } finally {
      await server.stop();
    }
  }, 120_000);

  test("300 registrations from one address, then the operator's client registers and is approved", async () => {
    using dir = tempDir();
    const state = join(dir.path, "state");
    const server = await startHttpServer({ workspace: dir.path, state }, { mode: "mcp", auth: "oauth", pin: PIN });
    try {
      const d = await discover(server.url);
      // The operator's client registers and its approval page opens (as a browser redirect does).
      const operator = await register(d, REDIRECT_URI, "operator app");
      const req = await authorizeRequest(d, operator);
      expect((await approvalPage(d, req)).status).toBe(200);
      // A flood from the same address (as behind a local tunnel) while the operator types the PIN.
      const flood: string[] = [];
      for (let i = 0; i < 300; i++) {
        const r = await registerRaw(d, `https://attacker.example/cb/${i}`, `flood ${i}`);
        expect(r.status).toBe(201);
        flood.push(((await r.json()) as { client_id: string }).client_id);
      }
      // The approval goes through: the open page's client was out of the flood's reach.
      const approved = await submitApproval(d, req, PIN);
      expect(approved.status).toBe(302);
      const tokens = await exchange(
        d,
        operator,
        callbackParams(d, operator, approved.headers.get("location")!, req.state),
        req,
      );
      const mcp = await connectHttp(server.url, { authorization: `Bearer ${tokens.access_token}` });
      expect((await mcp.ok<{ version: string }>("version")).version.length).toBeGreaterThan(0);
      await mcp.close();
      // A client registered after the flood gets in at once and is approved the whole way.
      const late = await obtainToken(server.url, PIN, "shell:read");
      expect(late.token.length).toBeGreaterThan(0);
      // The flood churned only its own entries: its last 10 are kept, the rest were replaced.
      const page = async (clientId: string, redirectUri: string) =>
        (
          await approvalPage(
            d,
            await authorizeRequest(d, { client_id: clientId, redirect_uris: [redirectUri] } as never),
          )
        ).status;
      expect(await page(flood[0]!, "https://attacker.example/cb/0")).toBe(400);
      expect(await page(flood[299]!, "https://attacker.example/cb/299")).toBe(200);
      // Reusing a registration stays free and adds nothing.
      const again = await registerRaw(d, "https://attacker.example/cb/299", "flood 299");
      expect(again.status).toBe(200);
      expect(((await again.json()) as { reused: boolean }).reused).toBe(true);
      await server.stop();
      const log = readFileSync(join(state, "audit_log", "audit.jsonl"), "utf8");
      // 290 by the flood itself, one more when the late client took the oldest remaining flood slot.
      expect(log.match(/"reason":"peer_allowance"/g)?.length).toBe(291);
      expect(log).not.toContain(`"client_id":"${operator.client_id}","created_at"`);
      expect(log).not.toContain("rate_limited");
    } finally {
      await server.stop();
    }
  }, 120_000);
});
