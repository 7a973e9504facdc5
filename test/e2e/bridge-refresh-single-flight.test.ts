import { expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { firstText, startHttpFixture, writeManifest } from "../bridge/helpers.ts";
import { connectStdio, type McpHandle, tempDir } from "../helpers/harness.ts";

const ROUNDS = 10;
const CALLS_PER_SERVE = 20;

interface Stats {
  refreshes: number;
  reuses: number;
  family_revoked: boolean;
}

// The fixture's authorization server rotates refresh tokens and revokes the whole family when an
// old one is presented again, and each refresh takes 300 ms, so every call that meets an expired
// access token is inside the refresh window of the others. Two `serve` processes share one store.
test("20 concurrent calls per serve after each expiry, two serves on one store: one refresh per expiry, none " +
  "lost", async () => {
  using scratch = tempDir("lsm-scratch-");
  using ws = tempDir("lsm-ws-");
  using st = tempDir("lsm-state-");
  const fixture = await startHttpFixture(scratch.path, {
    FIXTURE_OAUTH: "1",
    FIXTURE_REFRESH: "refresh-0",
    FIXTURE_REFRESH_DELAY_MS: "300",
  });
  const origin = new URL(fixture.url).origin;
  const stats = async () => (await (await fetch(`${origin}/control/stats`)).json()) as Stats;
  try {
    writeManifest(st.path, {
      version: 1,
      mcpServers: { fx: { type: "http", url: fixture.url, auth: { mode: "oauth" }, maxConcurrentCalls: 32 } },
    });
    const now = Math.floor(Date.now() / 1000);
    mkdirSync(join(st.path, "agent_auth"), { recursive: true, mode: 0o700 });
    const oauth = {
      tokens: { access_token: "expired-access", refresh_token: "refresh-0", token_type: "Bearer" },
      client_info: { client_id: "c" },
      stored_at: now - 7200,
      expires_at: now - 3600,
    };
    writeFileSync(
      join(st.path, "agent_auth", "credentials.json"),
      JSON.stringify({ version: 1, servers: { fx: { oauth } } }),
      { mode: 0o600 },
    );

    await using a = await connectStdio({ workspace: ws.path, state: st.path });
    await using b = await connectStdio({ workspace: ws.path, state: st.path });
    const burst = (mcp: McpHandle, round: number, who: string) =>
      Array.from({ length: CALLS_PER_SERVE }, (_, i) =>
        mcp.call("call_agent_mcp_tool", { server: "fx", tool: "echo", args: { text: `${who}-${round}-${i}` } }),
      );

    let lost = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      // Every access token stops working at once (round 1 starts from an already expired one).
      if (round > 1) expect((await fetch(`${origin}/control/expire`, { method: "POST" })).status).toBe(200);
      const results = await Promise.all([...burst(a, round, "a"), ...burst(b, round, "b")]);
      for (const [i, r] of results.entries()) {
        const who = i < CALLS_PER_SERVE ? "a" : "b";
        if (r.isError) {
          lost++;
          console.error(`round ${round}: ${JSON.stringify(r.content).slice(0, 300)}`);
          continue;
        }
        expect(firstText(r.structuredContent as Record<string, unknown>)).toBe(
          `${who}-${round}-${i % CALLS_PER_SERVE}`,
        );
      }
      const s = await stats();
      expect({ round, lost, ...s }).toEqual({ round, lost: 0, refreshes: round, reuses: 0, family_revoked: false });
    }
  } finally {
    await fixture.stop();
  }
}, 240_000);
