/**
 * Per-request cost of bearer verification: the same protected request (`POST /mcp` on an unknown
 * session id, answered 404 right after auth and the body limit) against the compiled binary with
 * auth_mode=none and with OAuth + a valid token, plus in-process JWT verification (first sight and
 * cached). Usage: bun scripts/bench/auth.ts [binary]   (default dist/local-shell-mcp)
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadSettings } from "../../src/config/load.ts";
import { OAuthServer } from "../../src/oauth/server.ts";
import { oauthUrls } from "../../src/oauth/urls.ts";
import { obtainToken } from "../../test/oauth/flow.ts";

const BIN = resolve(process.argv[2] ?? "dist/local-shell-mcp");
const N = 3000;
const PIN = "bench-pin-123456";

async function start(dir: string, auth: "none" | "oauth") {
  const proc = Bun.spawn(
    [
      BIN,
      "serve",
      "--mode",
      "mcp",
      "--workspace-root",
      dir,
      "--state-dir",
      join(dir, `state-${auth}`),
      "--auth-mode",
      auth,
      "--port",
      "0",
      "--oauth-admin-pin",
      PIN,
    ],
    {
      env: { ...process.env, LOCAL_SHELL_MCP_LOG_LEVEL: "3" },
      stderr: "pipe",
      stdout: "ignore",
    },
  );
  const reader = proc.stderr.getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(text);
    text += new TextDecoder().decode(value);
    const m = /listening on (http:\/\/\S+)\/mcp/.exec(text);
    if (m) return { url: m[1]!, proc };
  }
}

async function timeRequests(url: string, headers: Record<string, string>): Promise<number[]> {
  const init = {
    method: "POST",
    body: "{}",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-session-id": "none",
      ...headers,
    },
  };
  for (let i = 0; i < 300; i++) await (await fetch(`${url}/mcp`, init)).arrayBuffer();
  const out: number[] = [];
  for (let i = 0; i < N; i++) {
    const t = performance.now();
    const res = await fetch(`${url}/mcp`, init);
    await res.arrayBuffer();
    if (res.status !== 404) throw new Error(`unexpected ${res.status}`);
    out.push(performance.now() - t);
  }
  return out.sort((a, b) => a - b);
}

const stats = (xs: number[]) => ({
  median: xs[Math.floor(xs.length / 2)]!,
  p90: xs[Math.floor(xs.length * 0.9)]!,
  mean: xs.reduce((a, b) => a + b, 0) / xs.length,
});
const fmt = (ms: number) => `${(ms * 1000).toFixed(1)} µs`;

const dir = mkdtempSync(join(tmpdir(), "lsm-bench-auth-"));
const none = await start(dir, "none");
const oauth = await start(dir, "oauth");
try {
  const { token } = await obtainToken(oauth.url, PIN, "shell:read");
  const rounds: Array<{ none: number; oauth: number }> = [];
  for (let r = 0; r < 3; r++) {
    rounds.push({
      none: stats(await timeRequests(none.url, {})).median,
      oauth: stats(await timeRequests(oauth.url, { authorization: `Bearer ${token}` })).median,
    });
  }
  const noneMed = Math.min(...rounds.map((r) => r.none));
  const oauthMed = Math.min(...rounds.map((r) => r.oauth));
  console.log(`HTTP round trip, ${N} sequential requests x 3 rounds (best median):`);
  console.log(`  auth_mode=none          ${fmt(noneMed)}`);
  console.log(`  oauth + bearer token    ${fmt(oauthMed)}`);
  console.log(`  added by authentication ${fmt(oauthMed - noneMed)} (target <= 200 µs)`);

  const settings = loadSettings({ env: {}, flags: { workspace_root: dir, state_dir: join(dir, "state-oauth") } });
  const server = new OAuthServer(settings, oauthUrls(settings, oauth.url), { record: () => "" });
  await server.init();
  const M = 20_000;
  let t = performance.now();
  for (let i = 0; i < M; i++) await server.verify(token);
  const cached = (performance.now() - t) / M;
  t = performance.now();
  for (let i = 0; i < 2000; i++) {
    // A fresh instance each time: a first-sight verification (HMAC + claim checks by jose).
    const s = new OAuthServer(settings, oauthUrls(settings, oauth.url), { record: () => "" });
    await s.init();
    await s.verify(token);
  }
  const fresh = (performance.now() - t) / 2000;
  console.log(`in-process verify: cached ${fmt(cached)}, first sight incl. key load ${fmt(fresh)}`);
} finally {
  none.proc.kill();
  oauth.proc.kill();
  await Promise.all([none.proc.exited, oauth.proc.exited]);
  rmSync(dir, { recursive: true, force: true });
}
