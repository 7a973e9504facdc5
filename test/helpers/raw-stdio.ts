/**
 * A raw JSON-RPC peer for `serve --mode stdio`: writes lines the official client cannot produce
 * (oversized, deeply nested) and reads answers by id. Used where the SDK client would itself choke.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { binary, serverEnv, type ServerEnv, tempDir } from "./harness.ts";
import { waitFor } from "./wait.ts";

export interface RawStdio {
  proc: Bun.Subprocess<"pipe", "pipe", "pipe">;
  /** Sends one JSON-RPC message as a line. */
  send(message: unknown): void;
  /** Sends a line as given (a string or bytes, without the newline). */
  sendLine(line: string | Uint8Array): Promise<void>;
  /** Waits for the answer with this id. */
  answer(id: number | string, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** A request id not used before on this connection. */
  nextId(): number;
  /** Sends tools/call with a fresh id and waits for its answer. */
  call(name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** Initializes the MCP session. */
  initialize(): Promise<void>;
  stderr(): string;
  close(): Promise<void>;
}

export function startRawStdio(s: ServerEnv): RawStdio {
  const proc = Bun.spawn(
    [binary(), "serve", "--mode", "stdio", "--workspace-root", s.workspace, "--state-dir", s.state, ...(s.args ?? [])],
    {
      env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...s.env }),
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  const answers = new Map<string, Record<string, unknown>>();
  let errText = "";
  void (async () => {
    let buf = "";
    const decoder = new TextDecoder();
    for await (const chunk of proc.stdout) {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        const msg = JSON.parse(line) as Record<string, unknown>;
        if (msg.id !== undefined) answers.set(String(msg.id), msg);
      }
    }
  })();
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr) errText += decoder.decode(chunk, { stream: true });
  })();
  const sendLine = async (line: string | Uint8Array) => {
    proc.stdin.write(line);
    proc.stdin.write("\n");
    await proc.stdin.flush();
  };
  let lastId = 0;
  const raw: RawStdio = {
    proc,
    nextId: () => ++lastId,
    call(name, args, timeoutMs) {
      const id = raw.nextId();
      raw.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });
      return raw.answer(id, timeoutMs);
    },
    send: (message) => void sendLine(JSON.stringify(message)),
    sendLine,
    answer: (id, timeoutMs = 30_000) =>
      Promise.race([
        waitFor(() => answers.get(String(id)), { timeoutMs, what: `the answer to request ${id}` }),
        // A server that exits cannot answer: fail at once, saying so.
        proc.exited.then(async (code) => {
          await Bun.sleep(0);
          if (answers.has(String(id))) return answers.get(String(id))!;
          throw new Error(`the server exited (code ${code}) before answering request ${id}: ${errText}`);
        }),
      ]),
    async initialize() {
      raw.send({
        jsonrpc: "2.0",
        id: "init",
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } },
      });
      await raw.answer("init");
      raw.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    },
    stderr: () => errText,
    async close() {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        await proc.exited;
      }
    },
  };
  return raw;
}

/**
 * An initialized raw stdio server on a fresh temp dir (`ws/` and `state/` inside); close() stops
 * the server and removes the dir.
 */
export async function openRawStdio(
  s: Omit<ServerEnv, "workspace" | "state"> = {},
): Promise<RawStdio & { workspace: string }> {
  const dir = tempDir("lsm-raw-");
  const workspace = join(dir.path, "ws");
  mkdirSync(workspace);
  const raw = startRawStdio({ ...s, workspace, state: join(dir.path, "state") });
  const close = raw.close;
  raw.close = async () => {
    await close();
    dir[Symbol.dispose]();
  };
  try {
    await raw.initialize();
  } catch (e) {
    await raw.close();
    throw e;
  }
  return Object.assign(raw, { workspace });
}

/** The error code and text of a tools/call answer that failed as a tool result. */
export function toolError(answer: Record<string, unknown>): { code: string; text: string } {
  const result = answer.result as
    | { isError?: boolean; content?: Array<{ text?: string }>; _meta?: Record<string, { code?: string }> }
    | undefined;
  const text = result?.content?.[0]?.text ?? JSON.stringify(answer);
  return { code: result?.isError ? (result._meta?.["local-shell-mcp/error"]?.code ?? "unknown") : "none", text };
}
