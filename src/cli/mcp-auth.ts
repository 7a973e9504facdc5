import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { defineCommand } from "citty";
import { manifestPath, type ServerConfig } from "../bridge/manifest.ts";
import { StoreOAuthProvider, storedOAuth, updateOAuth } from "../bridge/oauth-provider.ts";
import { AgentBridge } from "../bridge/service.ts";
import { VERSION } from "../core/version.ts";
import {
  checkName,
  fail,
  guarded,
  loadManifest,
  mcpArgs,
  mcpContext,
  type McpContext,
  printJson,
  rejectUnknown,
} from "./mcp-common.ts";

const own = {
  server: {
    type: "positional",
    description: "Server name from the Agent Bridge manifest (auth.mode oauth)",
    required: true,
  },
  status: { type: "boolean", description: "Print the stored authorization status only" },
  logout: {
    type: "boolean",
    description: "Revoke at the authorization server if it can, then forget the local OAuth state",
  },
  // citty turns --no-open into open=false.
  open: {
    type: "boolean",
    default: true,
    description: "Open a browser for the authorization (--no-open only prints the URL)",
  },
} as const;
const args = mcpArgs(own);

/** Longest callback request line we accept on the loopback listener. */
const MAX_CALLBACK_BYTES = 16 * 1024;

function statusOf(ctx: McpContext, server: ServerConfig) {
  // Only the status logic of the bridge is used; nothing is started.
  return new AgentBridge(ctx.settings, () => Promise.reject(new Error("not used"))).authStatus(server);
}

async function revoke(
  ctx: McpContext,
  server: ServerConfig,
): Promise<{ remote: "revoked" | "unsupported" | "failed" | "not_authorized"; detail: string }> {
  const o = storedOAuth(ctx.store, server.name);
  const refresh = o.tokens?.refresh_token;
  const token = refresh ?? o.tokens?.access_token;
  if (!token) return { remote: "not_authorized", detail: "no stored tokens" };
  const endpoint = o.authorization_metadata?.revocation_endpoint;
  if (typeof endpoint !== "string" || !URL.canParse(endpoint))
    return { remote: "unsupported", detail: "the authorization server advertises no revocation endpoint" };
  const body = new URLSearchParams({ token, token_type_hint: refresh ? "refresh_token" : "access_token" });
  const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded" };
  const client = o.client_info as
    | { client_id?: string; client_secret?: string; token_endpoint_auth_method?: string }
    | undefined;
  if (client?.client_id) body.set("client_id", client.client_id);
  if (client?.client_id && client.client_secret) {
    if (client.token_endpoint_auth_method === "client_secret_post") body.set("client_secret", client.client_secret);
    else {
      const pair = `${encodeURIComponent(client.client_id)}:${encodeURIComponent(client.client_secret)}`;
      headers.authorization = `Basic ${Buffer.from(pair).toString("base64")}`;
    }
  }
  try {
    const r = await fetch(endpoint, {
      method: "POST",
      body,
      headers,
      redirect: "error",
      signal: AbortSignal.timeout(ctx.settings.agent_mcp_probe_timeout_s * 1000),
    });
    return r.status === 200 || r.status === 204
      ? { remote: "revoked", detail: `HTTP ${r.status}` }
      : { remote: "failed", detail: `the revocation endpoint answered HTTP ${r.status}` };
  } catch {
    return { remote: "failed", detail: "the revocation request could not be completed" };
  }
}

/** One-shot loopback listener for the authorization redirect. */
function callbackListener(provider: () => StoreOAuthProvider) {
  let settle: { resolve: (code: string) => void; reject: (e: Error) => void } | undefined;
  const code = new Promise<string>((resolve, reject) => (settle = { resolve, reject }));
  const listener = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 5,
    maxRequestBodySize: MAX_CALLBACK_BYTES,
    fetch(req) {
      const url = new URL(req.url);
      if (req.url.length > MAX_CALLBACK_BYTES) return new Response("request too large\n", { status: 414 });
      if (req.method !== "GET" || url.pathname !== "/callback") return new Response("not found\n", { status: 404 });
      const error = url.searchParams.get("error");
      if (error !== null) {
        settle?.reject(new Error(`the authorization server refused: ${error.replace(/[^\w.-]/g, "").slice(0, 64)}`));
        return new Response("Authorization failed. You can close this window.\n");
      }
      if (!provider().stateMatches(url.searchParams.get("state") ?? ""))
        return new Response("state mismatch\n", { status: 400 });
      const value = url.searchParams.get("code");
      if (!value) return new Response("missing code\n", { status: 400 });
      settle?.resolve(value);
      return new Response("Authorization complete. You can close this window and return to the terminal.\n");
    },
  });
  return { listener, code };
}

async function probeTools(ctx: McpContext, server: ServerConfig): Promise<number> {
  const url = new URL(server.url ?? "");
  const authProvider = new StoreOAuthProvider(ctx.store, server);
  const transport =
    server.type === "sse"
      ? new SSEClientTransport(url, { authProvider })
      : new StreamableHTTPClientTransport(url, { authProvider });
  const client = new Client({ name: "local-shell-mcp-agent-bridge", version: VERSION });
  const timeout = ctx.settings.agent_mcp_probe_timeout_s * 1000;
  try {
    await client.connect(transport, { timeout });
    let count = 0;
    let cursor: string | undefined;
    for (let page = 0; page < 100; page++) {
      const r = await client.listTools(cursor ? { cursor } : {}, { timeout });
      count += r.tools.length;
      cursor = r.nextCursor;
      if (!cursor) break;
    }
    return count;
  } finally {
    await client.close().catch(() => undefined);
  }
}

async function authorize(ctx: McpContext, server: ServerConfig, open: boolean): Promise<void> {
  let provider: StoreOAuthProvider | undefined;
  const { listener, code } = callbackListener(() => provider!);
  let authorizationUrl: URL | undefined;
  provider = new StoreOAuthProvider(ctx.store, server, {
    redirectUrl: `http://127.0.0.1:${listener.port}/callback`,
    onRedirect: (u) => (authorizationUrl = u),
  });
  const scope = server.auth.scopes.length > 0 ? server.auth.scopes.join(" ") : undefined;
  const serverUrl = server.url ?? "";
  const limitS = Math.max(30, ctx.settings.agent_mcp_call_timeout_s);
  try {
    let result = await auth(provider, { serverUrl, scope });
    if (result === "REDIRECT") {
      if (!authorizationUrl) fail("the authorization server gave no authorization URL");
      process.stderr.write(`Authorize ${server.name} in a browser:\n${authorizationUrl.href}\n`);
      if (open) {
        try {
          Bun.spawn(["xdg-open", authorizationUrl.href], { stdin: "ignore", stdout: "ignore", stderr: "ignore" });
        } catch {
          // No browser opener: the URL above is enough.
        }
      }
      let timer: Timer | undefined;
      const expired = new Promise<never>(
        (_, reject) =>
          (timer = setTimeout(() => reject(new Error(`no authorization arrived within ${limitS} s`)), limitS * 1000)),
      );
      const received = await Promise.race([code, expired]).finally(() => clearTimeout(timer));
      result = await auth(provider, { serverUrl, scope, authorizationCode: received });
    }
    if (result !== "AUTHORIZED") fail("the authorization did not complete");
  } catch (e) {
    fail(`authorization failed: ${(e as Error).message.slice(0, 300)}`);
  } finally {
    listener.stop(true);
  }
  let toolCount: number | null = null;
  try {
    toolCount = await probeTools(ctx, server);
  } catch (e) {
    fail(`authorized, but listing the tools of ${server.name} failed: ${(e as Error).message.slice(0, 300)}`);
  }
  ctx.audit.record("agent_oauth_authorize", { server: server.name });
  await ctx.audit.flush();
  printJson({ server: server.name, oauth_status: statusOf(ctx, server), tool_count: toolCount, home: ctx.home });
}

export default defineCommand({
  meta: {
    name: "auth",
    description: "Authorize the Agent Bridge at an upstream MCP server with OAuth (or show/forget the authorization)",
  },
  args,
  async run({ args: a }) {
    rejectUnknown(a, args, 1);
    const name = checkName("SERVER", a.server);
    if (a.status === true && a.logout === true) fail("--status and --logout cannot be combined");
    const ctx = mcpContext(a);
    const server = loadManifest(ctx).servers.get(name);
    if (!server) fail(`no MCP server named ${name} in the Agent Bridge manifest ${manifestPath(ctx.home)}`);
    if (server.auth.mode !== "oauth") fail(`MCP server ${name} does not use auth.mode "oauth"`);
    await guarded(async () => {
      if (a.status === true) {
        printJson({ server: name, oauth_status: statusOf(ctx, server), home: ctx.home });
        return;
      }
      if (a.logout === true) {
        const { remote, detail } = await revoke(ctx, server);
        // Local state goes whatever the authorization server said.
        await updateOAuth(ctx.store, name, () => ({}));
        ctx.audit.record("agent_oauth_logout", { server: name, remote_revocation: remote });
        await ctx.audit.flush();
        printJson({ server: name, local_credentials_cleared: true, remote_revocation: remote, detail, home: ctx.home });
        if (remote === "failed") process.exit(1);
        return;
      }
      await authorize(ctx, server, a.open !== false);
    });
  },
});
