/**
 * Human approval of risky commands (docs/approvals.md), through the compiled binary:
 * - a client that declares elicitation is asked with a form: accept runs the command once, decline
 *   is approval_denied, no answer within approval_timeout_s is approval_timed_out; nothing runs
 *   before an answer; "allow for this session" remembers the exact command only;
 * - the policy file is read again when it changes (no restart);
 * - a client without elicitation waits in the Human UI's approval queue, which the operator answers
 *   through /api/ui (cookie session + CSRF); a client's bearer token cannot see or answer it;
 * - 100 attempts, including the denylist's known bypass forms, matched by tool and session rules and
 *   declined every time, run 0 commands.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { type CallToolResult, ElicitRequestSchema, type ElicitResult } from "@modelcontextprotocol/sdk/types.js";
import {
  binary,
  connectHttp,
  errorCode,
  type HttpServer,
  type McpHandle,
  serverEnv,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { uiSignIn, type UiSession } from "../helpers/ui.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

function writePolicy(state: string, policy: unknown): void {
  mkdirSync(state, { recursive: true, mode: 0o700 });
  const path = join(state, "approvals.json");
  writeFileSync(path, JSON.stringify(policy));
  chmodSync(path, 0o600);
}

function auditEvents(state: string, event: string): Array<Record<string, unknown>> {
  const path = join(state, "audit_log", "audit.jsonl");
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.includes(`"${event}"`))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((r) => r.event === event);
}

const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

describe("approvals with an elicitation client (stdio)", () => {
  let dir: TempDir;
  let ws: string;
  let state: string;
  let client: Client;
  let sid: string;
  /** What the form handler does with the next request. */
  let answer: "accept" | "session" | "decline" | "deny-choice" | "never" = "accept";
  const asked: Array<{ message: string; schema: unknown }> = [];

  const call = async (args: Record<string, unknown>) =>
    (await client.callTool({ name: "bash", arguments: { session_id: sid, ...args } })) as CallToolResult;

  beforeAll(async () => {
    dir = tempDir("lsm-approvals-");
    ws = join(dir.path, "ws");
    state = join(dir.path, "state");
    mkdirSync(ws);
    writePolicy(state, { rules: [{ name: "touching files", commands: ["touch"] }] });
    const transport = new StdioClientTransport({
      command: binary(),
      args: ["serve", "--mode", "stdio", "--workspace-root", ws, "--state-dir", state],
      env: serverEnv({ LOCAL_SHELL_MCP_APPROVAL_TIMEOUT_S: "3" }),
      stderr: "pipe",
    });
    client = new Client({ name: "lsm-approvals-test", version: "0" }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async (req): Promise<ElicitResult> => {
      const p = req.params as { message: string; requestedSchema?: unknown };
      asked.push({ message: p.message, schema: p.requestedSchema });
      if (answer === "never") return new Promise<ElicitResult>(() => undefined);
      if (answer === "decline") return { action: "decline" };
      const decision = answer === "session" ? "allow_session" : answer === "deny-choice" ? "deny" : "allow_once";
      return { action: "accept", content: { decision } };
    });
    await client.connect(transport);
    const r = (await client.callTool({ name: "session_start", arguments: { workdir: "." } })) as CallToolResult;
    sid = (r.structuredContent as { session_id: string }).session_id;
  });

  afterAll(async () => {
    await client?.close().catch(() => undefined);
    dir?.[Symbol.dispose]();
  });

  test("a command no rule matches runs without asking", async () => {
    const r = await call({ command: "echo plain" });
    expect(r.isError).toBeFalsy();
    expect(asked.length).toBe(0);
  });

  test("accept runs the command once; the form shows command, cwd, session, machine and reason", async () => {
    answer = "accept";
    const r = await call({ command: "touch accepted.txt && echo ran >> runs.log", purpose: "make the marker" });
    expect(r.isError).toBeFalsy();
    expect(existsSync(join(ws, "accepted.txt"))).toBe(true);
    expect(readFileSync(join(ws, "runs.log"), "utf8")).toBe("ran\n");
    expect(asked.length).toBe(1);
    const m = asked[0]!.message;
    for (const part of [
      "touch accepted.txt",
      "cwd: .",
      `session: ${sid}`,
      "machine: local",
      "reason given: make the marker",
      "touching files",
    ])
      expect(m).toContain(part);
    expect(JSON.stringify(asked[0]!.schema)).toContain("allow_session");
  });

  test("decline (and choosing deny) is approval_denied and nothing runs", async () => {
    answer = "decline";
    const r = await call({ command: "touch declined.txt" });
    expect(errorCode(r)).toBe("approval_denied");
    expect(text(r)).toContain("Do not retry");
    answer = "deny-choice";
    expect(errorCode(await call({ command: "touch declined.txt" }))).toBe("approval_denied");
    expect(existsSync(join(ws, "declined.txt"))).toBe(false);
  });

  test("no answer within approval_timeout_s is approval_timed_out and nothing runs", async () => {
    answer = "never";
    const started = performance.now();
    // Asked with a progress token: the notifications say what the call waits for.
    const progress: string[] = [];
    const r = (await client.callTool(
      { name: "bash", arguments: { session_id: sid, command: "touch late.txt" } },
      undefined,
      {
        onprogress: (p) => progress.push(p.message ?? ""),
      },
    )) as CallToolResult;
    const waited = performance.now() - started;
    expect(progress.some((m) => m.includes("waiting for a person's approval (rule 'touching files'"))).toBe(true);
    expect(errorCode(r)).toBe("approval_timed_out");
    expect(waited).toBeGreaterThanOrEqual(2900);
    expect(waited).toBeLessThan(30_000);
    expect(existsSync(join(ws, "late.txt"))).toBe(false);
    console.log(`unanswered approval timed out after ${waited.toFixed(0)} ms (approval_timeout_s=3)`);
  });

  test("allow for this session remembers that exact command only", async () => {
    answer = "session";
    const before = asked.length;
    expect((await call({ command: "touch remembered.txt" })).isError).toBeFalsy();
    expect(asked.length).toBe(before + 1);
    answer = "decline";
    expect((await call({ command: "touch remembered.txt" })).isError).toBeFalsy();
    expect(asked.length).toBe(before + 1);
    expect(errorCode(await call({ command: "touch other.txt" }))).toBe("approval_denied");
    expect(asked.length).toBe(before + 2);
    expect(existsSync(join(ws, "other.txt"))).toBe(false);
  });

  test("every request and decision is audited", async () => {
    const requested = await waitFor(
      () => auditEvents(state, "approval_requested").length >= 6 && auditEvents(state, "approval_requested"),
      { what: "approval_requested records" },
    );
    expect(requested.some((r) => r.command === "touch late.txt" && r.session === sid && r.machine === "local")).toBe(
      true,
    );
    const decided = await waitFor(
      () => auditEvents(state, "approval_decided").length >= 7 && auditEvents(state, "approval_decided"),
      { what: "approval_decided records" },
    );
    const decisions = decided.map((r) => r.decision);
    for (const d of ["allow_once", "deny", "timed_out", "allow_session"]) expect(decisions).toContain(d);
    expect(decided.some((r) => r.via === "remembered")).toBe(true);
  });

  test("the policy file is read again when it changes", async () => {
    answer = "decline";
    writePolicy(state, { rules: [] });
    expect((await call({ command: "touch after-reload.txt" })).isError).toBeFalsy();
    writePolicy(state, {
      rules: [
        { name: "python", tools: ["run_python_code"] },
        { name: "echo now", commands: ["echo"] },
      ],
    });
    expect(errorCode(await call({ command: "echo hello" }))).toBe("approval_denied");
    // A policy that cannot be trusted (here: writable by others) makes every gated call wait.
    writePolicy(state, { rules: [] });
    chmodSync(join(state, "approvals.json"), 0o666);
    expect(errorCode(await call({ command: "true" }))).toBe("approval_denied");
  });

  test("100 attempts matched by tool and session rules, declined, run 0 commands", async () => {
    answer = "decline";
    const trap = join(ws, "trap");
    mkdirSync(trap);
    writeFileSync(join(trap, "x"), "keep");
    writePolicy(state, {
      rules: [
        {
          name: "this session's shell",
          tools: ["bash", "send_persistent_shell_input", "run_python_code"],
          sessions: [sid],
        },
      ],
    });
    const forms = [
      (i: number) => `$(echo rm) -rf x; touch ran-${i}`,
      (i: number) => `\`echo touch\` ran-${i}`,
      (i: number) => `eval "tou""ch ran-${i}"`,
      (i: number) => `c=touch; $c ran-${i}`,
      (i: number) => `bash -c 'touch ran-${i}'`,
      (i: number) => `printf 'touch ran-${i}' | sh`,
      (i: number) => `echo dG91Y2ggcmFu | base64 -d | sh; touch ran-${i}`,
      (i: number) => `\\rm -rf x; touch ran-${i}`,
    ];
    const before = asked.length;
    const codes = new Map<string, number>();
    const started = performance.now();
    for (let i = 0; i < 100; i++) {
      const r = await call({ command: forms[i % forms.length]!(i), cwd: "trap" });
      const code = errorCode(r);
      codes.set(code, (codes.get(code) ?? 0) + 1);
    }
    const ms = performance.now() - started;
    expect([...codes.entries()]).toEqual([["approval_denied", 100]]);
    expect(asked.length - before).toBe(100);
    expect(readdirSync(trap)).toEqual(["x"]);
    console.log(`100 declined attempts: 0 commands ran, ${(ms / 100).toFixed(1)} ms per attempt`);
  });
});

describe("approvals without elicitation: the Human UI queue (HTTP)", () => {
  const PIN = "approvals-pin-4242";
  let dir: TempDir;
  let ws: string;
  let state: string;
  let srv: HttpServer;
  let mcp: McpHandle;
  let token: string;
  let ui: UiSession;
  let sid: string;

  const uiGet = (name: string, auth?: string) =>
    fetch(`${srv.url}/api/ui/${name}`, {
      headers: auth
        ? { authorization: auth }
        : { cookie: ui.cookie, "x-local-shell-mcp-ui-binding": ui.binding, origin: srv.url },
    });
  const uiPost = (name: string, body: unknown, opts: { csrf?: boolean; auth?: string } = {}) => {
    const headers: Record<string, string> = opts.auth
      ? { authorization: opts.auth, "content-type": "application/json" }
      : {
          cookie: ui.cookie,
          "x-local-shell-mcp-ui-binding": ui.binding,
          origin: srv.url,
          "content-type": "application/json",
        };
    if (!opts.auth && opts.csrf !== false) headers["x-local-shell-mcp-ui-csrf"] = ui.csrf;
    return fetch(`${srv.url}/api/ui/${name}`, { method: "POST", headers, body: JSON.stringify(body) });
  };
  const pending = async () =>
    ((await (await uiGet("approvals")).json()) as { data: { pending: Array<Record<string, unknown>> } }).data.pending;

  beforeAll(async () => {
    dir = tempDir("lsm-approvals-ui-");
    ws = join(dir.path, "ws");
    state = join(dir.path, "state");
    mkdirSync(ws);
    writePolicy(state, { rules: [{ name: "touching files", commands: ["touch"], machines: ["local"] }] });
    srv = await startHttpServer(
      { workspace: ws, state, env: { LOCAL_SHELL_MCP_APPROVAL_TIMEOUT_S: "60" } },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    token = (await obtainToken(srv.url, PIN)).token;
    mcp = await connectHttp(srv.url, { authorization: `Bearer ${token}` });
    ui = await uiSignIn(srv.url, PIN, "shell:read shell:execute audit:read");
    sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  });

  afterAll(async () => {
    await mcp?.close();
    await srv?.stop();
    dir?.[Symbol.dispose]();
  });

  test("the call waits in the queue, the operator approves it in the UI, then it runs", async () => {
    const call = mcp.call("bash", {
      session_id: sid,
      command: "touch approved.txt",
      purpose: "marker for the UI test",
    });
    const [p] = await waitFor(
      async () => {
        const list = await pending();
        return list.length === 1 && list;
      },
      { what: "the call in the approval queue" },
    );
    expect(p).toMatchObject({
      tool: "bash",
      command: "touch approved.txt",
      cwd: ".",
      session: sid,
      machine: "local",
      reason: "marker for the UI test",
      rule: "touching files",
    });
    expect(existsSync(join(ws, "approved.txt"))).toBe(false);
    // A client's bearer token can neither see nor answer approvals; a POST without CSRF is refused.
    expect((await uiGet("approvals", `Bearer ${token}`)).status).toBe(403);
    expect((await uiPost("approvals/approve", { id: p!.id }, { auth: `Bearer ${token}` })).status).toBe(403);
    expect((await uiPost("approvals/approve", { id: p!.id }, { csrf: false })).status).toBe(403);
    expect(existsSync(join(ws, "approved.txt"))).toBe(false);
    const res = await uiPost("approvals/approve", { id: p!.id });
    expect(res.status).toBe(200);
    const r = await call;
    expect(r.isError).toBeFalsy();
    expect(existsSync(join(ws, "approved.txt"))).toBe(true);
    expect(await pending()).toEqual([]);
    // Answered once: a second answer finds nothing.
    expect((await uiPost("approvals/deny", { id: p!.id })).status).toBe(404);
  });

  test("over Streamable HTTP a client with elicitation is asked on its own connection, not queued", async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${srv.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    });
    const client = new Client({ name: "lsm-approvals-http", version: "0" }, { capabilities: { elicitation: {} } });
    const messages: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (req): Promise<ElicitResult> => {
      messages.push((req.params as { message: string }).message);
      // While the form is open the call is not in the operator's queue.
      expect(await pending()).toEqual([]);
      return { action: "accept", content: { decision: "allow_once" } };
    });
    await client.connect(transport);
    try {
      const r = (await client.callTool({
        name: "bash",
        arguments: { session_id: sid, command: "touch via-http-form.txt" },
      })) as CallToolResult;
      expect(r.isError).toBeFalsy();
      expect(messages.length).toBe(1);
      expect(messages[0]).toContain("touch via-http-form.txt");
      expect(existsSync(join(ws, "via-http-form.txt"))).toBe(true);
    } finally {
      await transport.terminateSession().catch(() => undefined);
      await client.close().catch(() => undefined);
    }
  });

  test("deny in the UI is approval_denied and nothing runs", async () => {
    const call = mcp.call("bash", { session_id: sid, command: "touch refused.txt" });
    const [p] = await waitFor(
      async () => {
        const list = await pending();
        return list.length === 1 && list;
      },
      { what: "the call in the approval queue" },
    );
    expect((await uiPost("approvals/deny", { id: p!.id })).status).toBe(200);
    const r = await call;
    expect(errorCode(r)).toBe("approval_denied");
    expect(existsSync(join(ws, "refused.txt"))).toBe(false);
    const decided = await waitFor(
      () => auditEvents(state, "approval_decided").length >= 3 && auditEvents(state, "approval_decided"),
      { what: "approval_decided records" },
    );
    expect(decided.map((d) => [d.decision, d.via])).toEqual([
      ["allow_once", "ui"],
      ["allow_once", "elicitation"],
      ["deny", "ui"],
    ]);
  });
});
