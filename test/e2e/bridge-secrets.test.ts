import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { firstText, fixtureServer, startHttpFixture, writeManifest } from "../bridge/helpers.ts";
import {
  binary,
  connectHttp,
  type HttpServer,
  type McpHandle,
  serverEnv,
  startHttp,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const sha256 = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest("hex");

interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `local-shell-mcp mcp ...` against a state dir, with `input` piped to stdin. */
async function cli(state: string, args: string[], input?: string | Uint8Array): Promise<CliResult> {
  const proc = Bun.spawn([binary(), "mcp", ...args, "--state-dir", state, "--workspace-root", "/tmp"], {
    env: serverEnv(),
    stdin: input === undefined ? "ignore" : new Blob([input]),
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

/** Every file under `dir` (payloads gunzipped) whose content contains `needle`. */
function filesContaining(dir: string, needle: string): string[] {
  const hits: string[] = [];
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    let bytes: Buffer = readFileSync(path);
    if (path.endsWith(".gz")) bytes = gunzipSync(bytes);
    if (bytes.includes(needle)) hits.push(path);
  }
  return hits;
}

/** Pids whose command line contains `needle`. */
function cmdlinesContaining(needle: string): number[] {
  const out: number[] = [];
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`).includes(needle)) out.push(Number(pid));
    } catch {
      // Ended while we looked.
    }
  }
  return out;
}

describe("Agent Bridge secrets", () => {
  let ws: TempDir;
  let state: TempDir;
  let scratch: TempDir;
  let upstream: Awaited<ReturnType<typeof startHttpFixture>>;
  let sse: Awaited<ReturnType<typeof startHttpFixture>>;
  let server: HttpServer;
  let mcp: McpHandle;
  const MARKER = `mk-${crypto.randomUUID()}`;
  const HTTP_TOKEN = `ht-${crypto.randomUUID()}`;
  const call = (server: string, tool: string, args: Record<string, unknown> = {}) =>
    mcp.ok<Record<string, unknown>>("call_agent_mcp_tool", { server, tool, args });

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    scratch = tempDir("lsm-scratch-");
    upstream = await startHttpFixture(scratch.path, { FIXTURE_TOKEN: HTTP_TOKEN });
    sse = await startHttpFixture(scratch.path, { FIXTURE_TOKEN: HTTP_TOKEN }, "sse");
    writeManifest(state.path, {
      version: 1,
      mcpServers: {
        envup: fixtureServer({ env: { API_TOKEN: { secret: "tok_alpha" } }, auth: { mode: "secret" } }),
        plain: fixtureServer(),
        httpup: {
          type: "http",
          url: upstream.url,
          headers: { Authorization: { secret: "auth_header" } },
          auth: { mode: "secret" },
        },
        sseup: {
          type: "sse",
          url: sse.url,
          headers: { Authorization: { secret: "auth_header" } },
          auth: { mode: "secret" },
        },
        needs: fixtureServer({ env: { X: { secret: "never_set" } }, auth: { mode: "secret" } }),
      },
    });
    server = await startHttp({ workspace: ws.path, state: state.path });
    mcp = await connectHttp(server.url);
  });

  afterAll(async () => {
    await mcp?.close();
    await server?.stop();
    await upstream?.stop();
    await sse?.stop();
    for (const d of [ws, state, scratch]) d?.[Symbol.dispose]();
  });

  test("secret set reads stdin only, strips one newline, prints JSON and stores owner-only", async () => {
    const r = await cli(state.path, ["secret", "set", "envup", "tok_alpha", "--stdin"], `${MARKER}\n`);
    expect(r).toEqual({
      code: 0,
      stdout: `${JSON.stringify({ server: "envup", name: "tok_alpha", stored: true, home: state.path })}\n`,
      stderr: "",
    });
    const dir = join(state.path, "agent_auth");
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, "credentials.json")).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir).sort()).toEqual(["credentials.json", "credentials.lock"]);
    expect(JSON.parse(readFileSync(join(dir, "credentials.json"), "utf8")).servers.envup.secrets.tok_alpha).toBe(
      MARKER,
    );
  });

  test("at a terminal the value is typed with echo off and never shown", async () => {
    const typed = `tty-${crypto.randomUUID()}`;
    // `script` gives the command a real pseudo-terminal; its output is everything the terminal showed.
    const command = [
      binary(),
      "mcp",
      "secret",
      "set",
      "plain",
      "typed",
      "--stdin",
      "--state-dir",
      state.path,
      "--workspace-root",
      "/tmp",
    ].join(" ");
    const proc = Bun.spawn(["script", "-qec", command, "/dev/null"], {
      env: serverEnv(),
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
    });
    let shown = "";
    const reader = proc.stdout.getReader();
    const reading = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        shown += new TextDecoder().decode(value);
      }
    })();
    // Type only once the prompt is up: echo is off by then, as it would be for a person.
    await waitFor(() => shown.includes("(input hidden)"), { what: "the hidden-input prompt" });
    proc.stdin.write(`${typed}\r`);
    await proc.stdin.flush();
    expect(await proc.exited).toBe(0);
    await reading;
    expect(shown).toContain('"stored":true');
    expect(shown).not.toContain(typed);
    expect(
      JSON.parse(readFileSync(join(state.path, "agent_auth", "credentials.json"), "utf8")).servers.plain.secrets.typed,
    ).toBe(typed);
    expect((await cli(state.path, ["secret", "delete", "plain", "typed"])).code).toBe(0);
  });

  test("bad secret input is refused with a one-line error and exit 2", async () => {
    const cases: Array<[string[], string | Uint8Array | undefined, RegExp]> = [
      [["secret", "set", "envup", "tok_alpha", MARKER, "--stdin"], "x", /too many arguments/],
      [["secret", "set", "envup", "tok_alpha", "--stdin", "--value", MARKER], "x", /unknown option/],
      [["secret", "set", "envup", "tok_alpha"], "x", /--stdin/],
      [["secret", "set", "nope", "tok_alpha", "--stdin"], "x", /no MCP server named nope/],
      [["secret", "set", "envup", "bad name", "--stdin"], "x", /NAME must be/],
      [["secret", "set", "envup", "tok_alpha", "--stdin"], "\n", /empty/],
      [["secret", "set", "envup", "tok_alpha", "--stdin"], "v".repeat(65_537), /exceeds 65536 bytes/],
      [["secret", "set", "envup", "tok_alpha", "--stdin"], new Uint8Array([0xff, 0xfe, 0x41]), /UTF-8/],
    ];
    for (const [args, input, why] of cases) {
      const r = await cli(state.path, args, input);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toStartWith("local-shell-mcp mcp: ");
      expect(r.stderr).toMatch(why);
      expect(r.stderr).not.toContain(MARKER);
    }
    // The stored value is untouched by the refused attempts.
    expect(
      JSON.parse(readFileSync(join(state.path, "agent_auth", "credentials.json"), "utf8")).servers.envup.secrets
        .tok_alpha,
    ).toBe(MARKER);
    // Exactly 64 KiB is accepted.
    expect((await cli(state.path, ["secret", "set", "plain", "big", "--stdin"], "b".repeat(65_536))).code).toBe(0);
    expect((await cli(state.path, ["secret", "delete", "plain", "big"])).code).toBe(0);
  });

  test("a stdio upstream gets the secret in its environment; results never show it", async () => {
    expect(firstText(await call("envup", "env_digest", { name: "API_TOKEN" }))).toBe(sha256(MARKER));
    const raw = firstText(await call("envup", "env_raw", { name: "API_TOKEN" }));
    expect(raw).toBe("value=<redacted>");
    const status = await mcp.ok<{
      mcp_servers: Record<string, { auth: Record<string, unknown>; env: Record<string, string> }>;
    }>("agent_config_status");
    expect(status.mcp_servers.envup!.auth).toEqual({
      mode: "secret",
      authorized: true,
      status: "configured",
      secret_reference_count: 1,
      missing_secret_count: 0,
      expires_at: null,
    });
    expect(status.mcp_servers.envup!.env).toEqual({ API_TOKEN: "<redacted>" });
    expect(JSON.stringify(status)).not.toContain("tok_alpha");
    expect(cmdlinesContaining(MARKER)).toEqual([]);
  });

  test("an HTTP upstream gets the secret as a header, resolved per request", async () => {
    expect(await mcp.fails("call_agent_mcp_tool", { server: "httpup", tool: "echo", args: { text: "x" } })).toBe(
      "missing_secret",
    );
    expect(
      (await cli(state.path, ["secret", "set", "httpup", "auth_header", "--stdin"], `Bearer ${HTTP_TOKEN}`)).code,
    ).toBe(0);
    expect(firstText(await call("httpup", "echo", { text: "through http" }))).toBe("through http");
    expect(firstText(await call("httpup", "header_digest"))).toBe(sha256(`Bearer ${HTTP_TOKEN}`));
    // A large result is cut to max_output_bytes; a response over 16 MiB is refused, not buffered.
    const big = await call("httpup", "huge", { bytes: 3_000_000 });
    expect(big.truncated).toBe(true);
    const code = await mcp.fails("call_agent_mcp_tool", {
      server: "httpup",
      tool: "huge",
      args: { bytes: 20 * 1024 * 1024 },
    });
    expect(["upstream_error", "upstream_unavailable"]).toContain(code);
    expect(firstText(await call("httpup", "echo", { text: "after" }))).toBe("after");
    // The stored header is gone: the next request goes out without it and fails.
    expect((await cli(state.path, ["secret", "delete", "httpup", "auth_header"])).stdout).toBe(
      `${JSON.stringify({ server: "httpup", name: "auth_header", deleted: true, home: state.path })}\n`,
    );
    expect(await mcp.fails("call_agent_mcp_tool", { server: "httpup", tool: "echo", args: { text: "x" } })).toBe(
      "missing_secret",
    );
  });

  test("an SSE upstream gets the secret as a header too", async () => {
    expect(await mcp.fails("call_agent_mcp_tool", { server: "sseup", tool: "echo", args: { text: "x" } })).toBe(
      "missing_secret",
    );
    expect(
      (await cli(state.path, ["secret", "set", "sseup", "auth_header", "--stdin"], `Bearer ${HTTP_TOKEN}`)).code,
    ).toBe(0);
    expect(firstText(await call("sseup", "echo", { text: "over sse" }))).toBe("over sse");
    expect(firstText(await call("sseup", "header_digest"))).toBe(sha256(`Bearer ${HTTP_TOKEN}`));
    expect((await cli(state.path, ["secret", "delete", "sseup", "auth_header"])).code).toBe(0);
  });

  test("a missing secret fails with missing_secret without naming it", async () => {
    const r = await mcp.call("call_agent_mcp_tool", { server: "needs", tool: "echo", args: { text: "x" } });
    const text = (r.content[0] as { text: string }).text;
    expect(text).toStartWith("[missing_secret]");
    expect(text).not.toContain("never_set");
    const status = await mcp.ok<{ mcp_servers: Record<string, { auth: Record<string, unknown>; available: boolean }> }>(
      "agent_config_status",
    );
    expect(status.mcp_servers.needs).toMatchObject({
      available: false,
      auth: { status: "missing_secret", missing_secret_count: 1 },
    });
  });

  test("a changed secret restarts only the upstream that uses it", async () => {
    const envPid = Number(((await call("envup", "whoami")).structured_content as { pid: number }).pid);
    const plainPid = Number(((await call("plain", "whoami")).structured_content as { pid: number }).pid);
    const next = `${MARKER}-2`;
    expect((await cli(state.path, ["secret", "set", "envup", "tok_alpha", "--stdin"], next)).code).toBe(0);
    expect(firstText(await call("envup", "env_digest", { name: "API_TOKEN" }))).toBe(sha256(next));
    expect(Number(((await call("envup", "whoami")).structured_content as { pid: number }).pid)).not.toBe(envPid);
    expect(Number(((await call("plain", "whoami")).structured_content as { pid: number }).pid)).toBe(plainPid);
    expect(firstText(await call("envup", "env_raw", { name: "API_TOKEN" }))).toBe("value=<redacted>");
  });

  test("list shows names only; the secret appears in no state file but credentials.json, nor in the logs", async () => {
    const listed = await cli(state.path, ["secret", "list"]);
    expect(JSON.parse(listed.stdout)).toEqual({ secrets: { envup: ["tok_alpha"] }, home: state.path });
    expect(JSON.parse((await cli(state.path, ["secret", "list", "plain"])).stdout)).toEqual({
      secrets: {},
      home: state.path,
    });
    await mcp.ok("audit_tail", { limit: 1 }).catch(() => undefined);
    // The audit writer runs after replies; wait for the last bridge call to be on disk.
    await waitFor(
      () => readFileSync(join(state.path, "audit_log", "audit.jsonl"), "utf8").includes("agent_secret_delete"),
      { what: "the audit log" },
    );
    for (const needle of [MARKER, HTTP_TOKEN]) {
      expect(filesContaining(state.path, needle).map((p) => p.slice(state.path.length))).toEqual(
        needle === MARKER ? ["/agent_auth/credentials.json"] : [],
      );
      expect(server.stderr()).not.toContain(needle);
    }
    const audit = readFileSync(join(state.path, "audit_log", "audit.jsonl"), "utf8");
    expect(audit).toContain('"event":"agent_secret_set"');
    expect(audit).toContain('"name":"tok_alpha"');
  });

  test("8 concurrent secret set commands all land", async () => {
    const runs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => cli(state.path, ["secret", "set", "plain", `k${i}`, "--stdin"], `v${i}`)),
    );
    expect(runs.map((r) => r.code)).toEqual(Array(8).fill(0));
    const listed = JSON.parse((await cli(state.path, ["secret", "list", "plain"])).stdout);
    expect(listed.secrets.plain).toEqual(["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"]);
  });

  test("after delete the value is nowhere, and a corrupt store is an error that leaves its bytes alone", async () => {
    for (let i = 0; i < 8; i++) await cli(state.path, ["secret", "delete", "plain", `k${i}`]);
    expect((await cli(state.path, ["secret", "delete", "envup", "tok_alpha"])).code).toBe(0);
    expect(filesContaining(state.path, MARKER)).toEqual([]);
    expect(await mcp.fails("call_agent_mcp_tool", { server: "envup", tool: "echo", args: { text: "x" } })).toBe(
      "missing_secret",
    );

    const path = join(state.path, "agent_auth", "credentials.json");
    const corrupt = '{"version": 1, "servers": {"envup": {"secrets": {"x": 5}}}}';
    writeFileSync(path, corrupt);
    const list = await cli(state.path, ["secret", "list"]);
    expect(list.code).toBe(2);
    expect(list.stderr).toMatch(/^local-shell-mcp mcp: .*refusing to use or reset it/);
    expect((await cli(state.path, ["secret", "set", "plain", "k", "--stdin"], "v")).code).toBe(2);
    expect(await mcp.fails("call_agent_mcp_tool", { server: "envup", tool: "echo", args: { text: "x" } })).toBe(
      "credential_store_corrupt",
    );
    expect(readFileSync(path, "utf8")).toBe(corrupt);
    writeFileSync(path, "not json");
    expect((await cli(state.path, ["secret", "delete", "plain", "k"])).code).toBe(2);
    expect(readFileSync(path, "utf8")).toBe("not json");
  });
});
