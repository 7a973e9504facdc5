import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { firstText, startHttpFixture, writeManifest } from "../bridge/helpers.ts";
import {
  binary,
  connectStdio,
  type HttpServer,
  serverEnv,
  startHttpServer,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const PIN = "bridge-test-pin-4821";

async function cli(state: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([binary(), "mcp", ...args, "--state-dir", state, "--workspace-root", "/tmp"], {
    env: serverEnv(),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

/**
 * Runs `mcp auth up --no-open` the way a person would: open the printed URL, type the PIN on the
 * approval page, let the browser follow the redirect. Returns the command's JSON result.
 */
async function mcpAuth(state: string): Promise<Record<string, any>> {
  const proc = Bun.spawn(
    [binary(), "mcp", "auth", "up", "--no-open", "--state-dir", state, "--workspace-root", "/tmp"],
    { env: serverEnv(), stdin: "ignore", stdout: "pipe", stderr: "pipe" },
  );
  let stderr = "";
  const reader = proc.stderr.getReader();
  const reading = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      stderr += new TextDecoder().decode(value);
    }
  })();
  const stdout = new Response(proc.stdout).text();
  const printed = await waitFor(() => /^(http:\/\/127\.0\.0\.1:\d+\/\S+)$/m.exec(stderr)?.[1], {
    what: "the authorization URL on stderr",
  });
  const authorizeUrl = new URL(printed);
  // The approval form posts the authorization request back with the PIN.
  const form = new URLSearchParams({ ...Object.fromEntries(authorizeUrl.searchParams), pin: PIN, decision: "approve" });
  const approved = await fetch(`${authorizeUrl.origin}${authorizeUrl.pathname}`, {
    method: "POST",
    body: form,
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
  expect(approved.status).toBe(302);
  const callback = approved.headers.get("location")!;
  expect(callback).toStartWith("http://127.0.0.1:");
  const landed = await fetch(callback);
  expect(await landed.text()).toContain("Authorization complete");
  expect(await proc.exited).toBe(0);
  await reading;
  return JSON.parse(await stdout);
}

// A second `serve` with OAuth on is the upstream; `mcp auth` is completed the way a person would:
// open the printed URL, type the PIN on the approval page, let the browser follow the redirect.
describe("Agent Bridge upstream OAuth", () => {
  let ws: TempDir;
  let state: TempDir;
  let upState: TempDir;
  let upstream: HttpServer;

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    upState = tempDir("lsm-upstate-");
    upstream = await startHttpServer(
      { workspace: ws.path, state: upState.path },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    writeManifest(state.path, {
      version: 1,
      mcpServers: { up: { type: "http", url: `${upstream.url}/mcp`, auth: { mode: "oauth", scopes: ["shell:read"] } } },
    });
  });

  afterAll(async () => {
    await upstream?.stop();
    for (const d of [ws, state, upState]) d?.[Symbol.dispose]();
  });

  test("mcp auth --no-open, then serve calls the upstream with the stored token; --logout forgets it", async () => {
    expect(JSON.parse((await cli(state.path, ["auth", "up", "--status"])).stdout)).toEqual({
      server: "up",
      oauth_status: {
        mode: "oauth",
        authorized: false,
        status: "unauthorized",
        expires_at: null,
        client_registered: false,
      },
      home: state.path,
    });
    const result = await mcpAuth(state.path);
    expect(result).toMatchObject({
      server: "up",
      oauth_status: { mode: "oauth", authorized: true, status: "authorized", client_registered: true },
    });
    expect(result.tool_count).toBeGreaterThan(5);
    const stored = JSON.parse(readFileSync(join(state.path, "agent_auth", "credentials.json"), "utf8")).servers.up
      .oauth;
    expect(typeof stored.tokens.access_token).toBe("string");
    expect(stored.expires_at).toBe(stored.stored_at + stored.tokens.expires_in);

    await using mcp = await connectStdio({ workspace: ws.path, state: state.path });
    const r = await mcp.ok<Record<string, unknown>>("call_agent_mcp_tool", { server: "up", tool: "version" });
    expect(firstText(r)).toContain("local-shell-mcp");
    const status = await mcp.ok<{ mcp_servers: Record<string, { auth: Record<string, unknown> }> }>(
      "agent_config_status",
    );
    expect(status.mcp_servers.up!.auth).toMatchObject({ status: "authorized", authorized: true });
    expect(JSON.stringify(status)).not.toContain(stored.tokens.access_token);

    // Our authorization server revokes (RFC 7009); local state is cleared either way.
    const out = await cli(state.path, ["auth", "up", "--logout"]);
    expect(out.code).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({
      server: "up",
      local_credentials_cleared: true,
      remote_revocation: "revoked",
    });
    expect(
      JSON.parse(readFileSync(join(state.path, "agent_auth", "credentials.json"), "utf8")).servers.up,
    ).toBeUndefined();
    expect(await mcp.fails("call_agent_mcp_tool", { server: "up", tool: "version" })).toBe("upstream_auth_required");
    const again = await mcp.call("call_agent_mcp_tool", { server: "up", tool: "version" });
    expect((again.content[0] as { text: string }).text).toContain("local-shell-mcp mcp auth up");
  });

  test(
    "crafted entries: revoked at an endpoint that accepts, unsupported without one, failed (exit 1) at one " +
      "that does not answer",
    async () => {
      using scratch = tempDir("lsm-scratch-");
      const fixture = await startHttpFixture(scratch.path);
      try {
        const path = join(state.path, "agent_auth", "credentials.json");
        const craft = (endpoint: string) =>
          writeFileSync(
            path,
            JSON.stringify({
              version: 1,
              servers: {
                up: {
                  oauth: {
                    tokens: { access_token: "a", refresh_token: "r", token_type: "Bearer" },
                    client_info: { client_id: "c" },
                    authorization_metadata: { revocation_endpoint: endpoint },
                  },
                },
              },
            }),
            { mode: 0o600 },
          );
        craft(fixture.url.replace(/\/mcp$/, "/revoke"));
        const ok = await cli(state.path, ["auth", "up", "--logout"]);
        expect(ok.code).toBe(0);
        expect(JSON.parse(ok.stdout)).toMatchObject({ remote_revocation: "revoked", local_credentials_cleared: true });
        writeFileSync(
          path,
          JSON.stringify({
            version: 1,
            servers: {
              up: {
                oauth: {
                  tokens: { access_token: "a", token_type: "Bearer" },
                  client_info: { client_id: "c" },
                  authorization_metadata: {},
                },
              },
            },
          }),
          { mode: 0o600 },
        );
        const unsupported = await cli(state.path, ["auth", "up", "--logout"]);
        expect(unsupported.code).toBe(0);
        expect(JSON.parse(unsupported.stdout)).toMatchObject({
          remote_revocation: "unsupported",
          local_credentials_cleared: true,
        });
        craft("http://127.0.0.1:1/revoke");
        const bad = await cli(state.path, ["auth", "up", "--logout"]);
        expect(bad.code).toBe(1);
        expect(JSON.parse(bad.stdout)).toMatchObject({ remote_revocation: "failed", local_credentials_cleared: true });
        expect(JSON.parse(readFileSync(path, "utf8")).servers.up).toBeUndefined();
        const none = await cli(state.path, ["auth", "up", "--logout"]);
        expect(JSON.parse(none.stdout)).toMatchObject({ remote_revocation: "not_authorized" });
      } finally {
        await fixture.stop();
      }
    },
  );

  test(
    "serve refreshes an expired token with the stored " + "refresh token; a failed refresh clears the tokens",
    async () => {
      using scratch = tempDir("lsm-scratch-");
      using st = tempDir("lsm-state-");
      const fixture = await startHttpFixture(scratch.path, { FIXTURE_OAUTH: "1", FIXTURE_REFRESH: "refresh-0" });
      try {
        writeManifest(st.path, {
          version: 1,
          mcpServers: { fx: { type: "http", url: fixture.url, auth: { mode: "oauth" } } },
        });
        const path = join(st.path, "agent_auth", "credentials.json");
        const now = Math.floor(Date.now() / 1000);
        const craft = (access: string, refresh: string) => {
          mkdirSync(join(st.path, "agent_auth"), { recursive: true, mode: 0o700 });
          writeFileSync(
            path,
            JSON.stringify({
              version: 1,
              servers: {
                fx: {
                  oauth: {
                    tokens: { access_token: access, refresh_token: refresh, token_type: "Bearer" },
                    client_info: { client_id: "c" },
                    stored_at: now - 7200,
                    expires_at: now - 3600,
                  },
                },
              },
            }),
            { mode: 0o600 },
          );
        };
        craft("expired-access", "refresh-0");
        expect(JSON.parse((await cli(st.path, ["auth", "fx", "--status"])).stdout).oauth_status).toMatchObject({
          status: "refreshable",
          authorized: true,
        });
        await using mcp = await connectStdio({ workspace: ws.path, state: st.path });
        expect(
          firstText(
            await mcp.ok<Record<string, unknown>>("call_agent_mcp_tool", {
              server: "fx",
              tool: "echo",
              args: { text: "refreshed" },
            }),
          ),
        ).toBe("refreshed");
        const stored = JSON.parse(readFileSync(path, "utf8")).servers.fx.oauth;
        expect(stored.tokens).toMatchObject({ access_token: "fixture-access-1", refresh_token: "fixture-refresh-1" });
        expect(stored.expires_at).toBe(stored.stored_at + 3600);
        expect(JSON.parse((await cli(st.path, ["auth", "fx", "--status"])).stdout).oauth_status).toMatchObject({
          status: "authorized",
        });

        // A refresh the authorization server refuses: the tokens go, and a new `mcp auth` is asked for.
        craft("expired-again", "not-the-current-refresh-token");
        expect(await mcp.fails("call_agent_mcp_tool", { server: "fx", tool: "echo", args: { text: "x" } })).toBe(
          "upstream_auth_required",
        );
        expect(JSON.parse(readFileSync(path, "utf8")).servers.fx?.oauth?.tokens).toBeUndefined();
      } finally {
        await fixture.stop();
      }
    },
  );
});

// Our own authorization server as the upstream's, with two-second access tokens: the bridge renews
// them with the refresh token, and after --logout the upstream refuses every old token.
describe("Agent Bridge against our own authorization server", () => {
  test(
    "an expired access token is refreshed on the next call; " + "after --logout old tokens are refused upstream",
    async () => {
      using ws = tempDir("lsm-ws-");
      using state = tempDir("lsm-state-");
      using upState = tempDir("lsm-upstate-");
      await using upstream = await startHttpServer(
        { workspace: ws.path, state: upState.path, args: ["--oauth-access-token-ttl-s", "2"] },
        { mode: "mcp", auth: "oauth", pin: PIN },
      );
      writeManifest(state.path, {
        version: 1,
        mcpServers: {
          up: { type: "http", url: `${upstream.url}/mcp`, auth: { mode: "oauth", scopes: ["shell:read"] } },
        },
      });
      expect((await mcpAuth(state.path)).oauth_status).toMatchObject({ authorized: true });
      const stored = () =>
        JSON.parse(readFileSync(join(state.path, "agent_auth", "credentials.json"), "utf8")).servers.up?.oauth
          ?.tokens as { access_token: string; refresh_token: string } | undefined;
      const first = stored()!;
      expect(first.refresh_token).toBeDefined();
      const upstreamAccepts = async (token: string) =>
        (
          await fetch(`${upstream.url}/mcp`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${token}`,
              "content-type": "application/json",
              accept: "application/json, text/event-stream",
            },
            body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
          })
        ).status !== 401;
      // Wait for the condition itself (the upstream refusing the first token), not for a clock.
      await waitFor(async () => !(await upstreamAccepts(first.access_token)), {
        what: "the first access token to expire upstream",
      });

      await using mcp = await connectStdio({ workspace: ws.path, state: state.path });
      const r = await mcp.ok<Record<string, unknown>>("call_agent_mcp_tool", { server: "up", tool: "version" });
      expect(firstText(r)).toContain("local-shell-mcp");
      const renewed = stored()!;
      expect(renewed.access_token).not.toBe(first.access_token);
      expect(renewed.refresh_token).not.toBe(first.refresh_token);

      const clientId = JSON.parse(readFileSync(join(state.path, "agent_auth", "credentials.json"), "utf8")).servers.up
        .oauth.client_info.client_id as string;
      expect(await upstreamAccepts(renewed.access_token)).toBe(true);
      const out = await cli(state.path, ["auth", "up", "--logout"]);
      expect(JSON.parse(out.stdout)).toMatchObject({ remote_revocation: "revoked", local_credentials_cleared: true });
      expect(stored()).toBeUndefined();
      // The revoked family: the upstream refuses its refresh token and the access token it last issued.
      expect(await upstreamAccepts(renewed.access_token)).toBe(false);
      const refreshed = await fetch(`${upstream.url}/oauth/token`, {
        method: "POST",
        body: new URLSearchParams({
          grant_type: "refresh_token",
          refresh_token: renewed.refresh_token,
          client_id: clientId,
        }),
      });
      expect(((await refreshed.json()) as { error: string }).error).toBe("invalid_grant");
      expect(await mcp.fails("call_agent_mcp_tool", { server: "up", tool: "version" })).toBe("upstream_auth_required");
    },
  );
});
