/**
 * The official MCP client over stdio against `local-shell-mcp ssh` (compiled binary), shared by the
 * ssh end-to-end tests: envelope-aware `call`/`ok`/`fails`, the server's pid and stderr, and the
 * process probes those tests use ("which of our ssh/rsync processes still run", "how many remote
 * processes match"). The fixture's `ssh` wrapper is put first on PATH.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { $ } from "bun";
import { binary, serverEnv } from "./harness.ts";
import type { Sshd } from "./sshd.ts";
import { waitFor } from "./wait.ts";

export type Envelope = { ok: boolean; result: any; error: { code: string; message: string } | null };

export interface SshClient {
  client: Client;
  transport: StdioClientTransport;
  /** The envelope of one call; `signal` cancels the MCP request. */
  call(name: string, args?: Record<string, unknown>, signal?: AbortSignal): Promise<Envelope>;
  /** The raw MCP result (content text, isError) of one call. */
  raw(name: string, args?: Record<string, unknown>, signal?: AbortSignal): Promise<CallToolResult>;
  ok(name: string, args?: Record<string, unknown>): Promise<any>;
  fails(name: string, args?: Record<string, unknown>): Promise<string>;
  /** Every content text answered so far (leak checks). */
  texts: string[];
  stderr(): string;
  pid(): number;
  close(): Promise<void>;
}

export interface SshClientOptions {
  sshd: Sshd;
  localRoot: string;
  /** Extra CLI flags after the defaults (a later flag wins). */
  args?: string[];
  env?: Record<string, string>;
}

/** Starts the ssh server under the MCP client; defaults keep transfers slow enough to observe. */
export async function startSshClient(opts: SshClientOptions): Promise<SshClient> {
  const transport = new StdioClientTransport({
    command: binary(),
    args: [
      "ssh",
      "--local-root",
      opts.localRoot,
      "--command-timeout",
      "20",
      "--transfer-bwlimit",
      "4096",
      ...(opts.args ?? []),
    ],
    env: serverEnv({
      PATH: `${opts.sshd.binDir}:${process.env.PATH}`,
      LOCAL_SHELL_MCP_LOG_LEVEL: "4",
      ...(opts.env ?? {}),
    }),
    stderr: "pipe",
  });
  let err = "";
  transport.stderr?.on("data", (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: "lsm-ssh-test", version: "0" });
  await client.connect(transport);
  const texts: string[] = [];
  const raw = async (name: string, args: Record<string, unknown> = {}, signal?: AbortSignal) => {
    const r = (await client.callTool({ name, arguments: args }, undefined, {
      timeout: 120_000,
      signal,
    })) as CallToolResult;
    const first = r.content[0] as { text?: string } | undefined;
    if (first?.text !== undefined) texts.push(first.text);
    // the contract: the text is the same envelope as structuredContent, and isError iff !ok
    const env = r.structuredContent as Envelope | undefined;
    if (
      !env ||
      first?.text === undefined ||
      !Bun.deepEquals(JSON.parse(first.text), env) ||
      Boolean(r.isError) !== !env.ok
    ) {
      throw new Error(`${name}: the text content and structuredContent disagree or isError is wrong`);
    }
    return r;
  };
  const call = async (name: string, args: Record<string, unknown> = {}, signal?: AbortSignal) =>
    (await raw(name, args, signal)).structuredContent as Envelope;
  return {
    client,
    transport,
    call,
    raw,
    async ok(name, args) {
      const e = await call(name, args);
      if (!e.ok) throw new Error(`${name}: ${JSON.stringify(e.error)}`);
      return e.result;
    },
    async fails(name, args) {
      const e = await call(name, args);
      if (e.ok) throw new Error(`${name} unexpectedly succeeded`);
      return e.error!.code;
    },
    texts,
    stderr: () => err,
    pid: () => transport.pid!,
    close: async () => {
      await client.close().catch(() => undefined);
    },
  };
}

/** The session_id/session_key pair of a connect result. */
export function keyOf(c: { session_id: string; session_key: string }): { session_id: string; session_key: string } {
  return { session_id: c.session_id, session_key: c.session_key };
}

/** Local ssh/rsync processes that belong to this fixture (the wrapper's config path is in their argv). */
export async function fixtureProcesses(sshd: Sshd): Promise<string[]> {
  const out = await $`ps -eo pid=,args=`.text();
  return out
    .split("\n")
    .filter(
      (l) => l.includes(`${sshd.dir}/`) && !l.includes("sshd -D") && /\b(ssh|rsync)\b/.test(l) && !l.includes("ps -eo"),
    );
}

/** How many processes of `user` have `pattern` in their command line. */
export async function processCount(user: string, pattern: string): Promise<number> {
  return (await $`pgrep -u ${user} -f ${pattern}`.nothrow().text()).split("\n").filter(Boolean).length;
}

/** Polls a transfer until it reaches a final state. */
export async function transferDone(
  s: SshClient,
  key: { session_id: string; session_key: string },
  id: string,
  timeoutMs = 60_000,
): Promise<any> {
  return await waitFor(
    async () => {
      const t = await s.ok("transfer_status", { ...key, operation_id: id });
      return ["completed", "failed", "cancelled"].includes(t.state) ? t : undefined;
    },
    { timeoutMs, intervalMs: 50, what: `transfer ${id} to finish` },
  );
}
