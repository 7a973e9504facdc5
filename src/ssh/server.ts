/**
 * The ssh MCP server (stdio): a small registry over the 13 ssh tools that validates strictly,
 * wraps every answer in the `{ok, result, error}` envelope and never lets internal details out.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, type CallToolResult, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import { BoundedStdioTransport } from "../core/mcp-stdio-transport.ts";
import { mcpStdin } from "../core/stdin.ts";
import { log } from "../core/log.ts";
import { randomHex } from "../core/random.ts";
import { VERSION } from "../core/version.ts";
import instructions from "./instructions.md" with { type: "text" };
import { sweepControlDirs } from "./master.ts";
import { stopAll, terminateAllNow } from "./proc.ts";
import { SessionManager } from "./sessions.ts";
import type { SshSettings } from "./settings.ts";
import { type SshContext, type SshTool, sshTools } from "./tools.ts";

const BASE_INVALID = "tool arguments failed strict validation";
/**
 * One MCP message from the client. Arguments are paths, commands and small texts (file bodies move
 * by rsync), so the serve default for max_http_request_bytes is ample; a longer line is answered with
 * an error and discarded as it streams in instead of growing in memory.
 */
const MAX_MESSAGE_BYTES = 16_000_000;

/** The strict-validation message: field names only, never values or unknown names. */
export function invalidArgumentsMessage(error: z.ZodError): string {
  const fields = new Set<string>();
  let unknown = false;
  for (const issue of error.issues) {
    if (issue.code === "unrecognized_keys") unknown = true;
    else if (issue.path.length > 0) fields.add(String(issue.path[0]));
  }
  let msg = BASE_INVALID;
  if (fields.size > 0) msg += `; missing or invalid fields: ${[...fields].sort().join(", ")}`;
  if (unknown) msg += "; unknown fields are not allowed";
  if (fields.has("session_id") || fields.has("session_key"))
    msg += "; pass the session_id and session_key returned by connect";
  return msg;
}

type Envelope =
  | { ok: true; result: unknown; error: null }
  | { ok: false; result: null; error: { code: string; message: string } };

function envelopeResult(env: Envelope): CallToolResult {
  return {
    content: [{ type: "text", text: JSON.stringify(env) }],
    structuredContent: env,
    ...(env.ok ? {} : { isError: true }),
  };
}

function fail(code: string, message: string): Envelope {
  return { ok: false, result: null, error: { code, message } };
}

function fill(text: string, s: SshSettings): string {
  const values: Record<string, string> = {
    command_timeout: String(s.commandTimeoutS),
    max_output_bytes: String(s.maxOutputBytes),
  };
  return text.trim().replace(/\{\{(\w+)\}\}/g, (m, k: string) => values[k] ?? m);
}

function jsonSchema(schema: z.ZodType, io: "input" | "output"): Record<string, unknown> {
  const out = z.toJSONSchema(schema, { io, unrepresentable: "any" }) as Record<string, unknown>;
  delete out.$schema;
  return out;
}

export class SshRegistry {
  private readonly byName = new Map<string, SshTool>();

  constructor(
    private readonly settings: SshSettings,
    readonly sessions: SessionManager,
  ) {
    for (const t of sshTools) this.byName.set(t.name, t);
  }

  list() {
    return sshTools.map((t) => {
      const envelope = z.object({
        ok: z.boolean(),
        result: t.result.nullable(),
        error: z.object({ code: z.string(), message: z.string() }).nullable(),
      });
      return {
        name: t.name,
        title: t.title,
        description: fill(t.description, this.settings),
        inputSchema: { ...jsonSchema(t.input, "input"), ...(t.inputExtra ?? {}) } as { type: "object" },
        outputSchema: jsonSchema(envelope, "output") as { type: "object" },
        annotations: { title: t.title, ...t.annotations },
      };
    });
  }

  async call(name: string, args: unknown, signal: AbortSignal): Promise<Envelope> {
    const t = this.byName.get(name);
    if (!t) return fail("unknown_tool", "requested tool is not available");
    const parsed = t.input.safeParse(args ?? {});
    if (!parsed.success) return fail("invalid_arguments", invalidArgumentsMessage(parsed.error));
    const ctx: SshContext = { settings: this.settings, sessions: this.sessions, signal };
    try {
      const result = t.result.parse(await t.run(ctx, parsed.data as never));
      return { ok: true, result, error: null };
    } catch (e) {
      if (e instanceof ToolError) return fail(e.code, e.message);
      // An incident: the class name and the stack's frames are logged, never the message (it may
      // quote OpenSSH's stderr or private paths); the caller's error names the same id.
      const id = randomHex(4);
      const frames =
        e instanceof Error
          ? (e.stack ?? "")
              .split("\n")
              .filter((l) => /^\s+at /.test(l))
              .slice(0, 20)
              .join("\n")
          : "";
      log.error(
        `incident ${id}: ssh tool ${name} failed internally ` +
          `(${e instanceof Error ? e.name : typeof e})${frames ? `\n${frames}` : ""}`,
      );
      return fail("internal_error", `tool failed internally (incident ${id}; see the server log)`);
    }
  }
}

/** Builds the MCP server object over a registry. */
export function createSshMcpServer(registry: SshRegistry): Server {
  const server = new Server(
    { name: "local-shell-mcp-ssh", title: "Remote SSH MCP", version: VERSION },
    { capabilities: { tools: {} }, instructions },
  );
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: registry.list() }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) =>
    envelopeResult(await registry.call(request.params.name, request.params.arguments ?? {}, extra.signal)),
  );
  return server;
}

/** Runs the ssh server on stdio until stdin closes or a signal arrives, then cleans up and exits 0. */
export async function serveSsh(settings: SshSettings): Promise<void> {
  const sessions = new SessionManager(settings);
  const registry = new SshRegistry(settings, sessions);
  const server = createSshMcpServer(registry);
  let stopping: Promise<void> | undefined;
  const shutdown = (reason: string) => {
    if (stopping) return stopping;
    log.info(`ssh server shutting down (${reason})`);
    stopping = (async () => {
      const hard = setTimeout(() => {
        terminateAllNow();
        process.exit(1);
      }, 15_000);
      await sessions.closeAll().catch(() => undefined);
      await stopAll(2000);
      await server.close().catch(() => undefined);
      clearTimeout(hard);
      process.exit(0);
    })();
    return stopping;
  };
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(sig, () => {
      // a second signal cuts the shutdown short, but never leaves a master or rsync behind
      if (stopping) {
        terminateAllNow();
        process.exit(130);
      }
      void shutdown(sig);
    });
  }
  const stdin = mcpStdin();
  stdin.on("end", () => void shutdown("stdin closed"));
  stdin.on("close", () => void shutdown("stdin closed"));
  await server.connect(new BoundedStdioTransport(MAX_MESSAGE_BYTES, "the ssh server's message limit", stdin));
  const swept = settings.localRoot.sweep();
  if (swept.spools + swept.partials > 0)
    log.info(`swept ${swept.spools} stale spool files and ${swept.partials} stale partials`);
  // what a killed server left: its master and rsync died with it (lsm-runner), its control directory did not
  void sweepControlDirs().then(
    (n) => n > 0 && log.info(`removed ${n} stale SSH control directories`),
    () => undefined,
  );
  log.info("ssh MCP server ready on stdio");
}
