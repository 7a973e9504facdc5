import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { SessionId } from "../common.ts";
import type { ToolContext } from "../context.ts";
import { pick } from "../compact.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import killDescription from "./kill-persistent-shell.md" with { type: "text" };
import listDescription from "./list-persistent-shells.md" with { type: "text" };
import readDescription from "./read-persistent-shell-output.md" with { type: "text" };
import resizeDescription from "./resize-persistent-shell.md" with { type: "text" };
import sendDescription from "./send-persistent-shell-input.md" with { type: "text" };

const ShellId = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, "must be a shell_id returned by bash pty=true");
const OwnerSession = SessionId.nullable()
  .default(null)
  .describe("The session that started the shell; recommended, and required to act on it strictly as its owner.");
const MAX_WAIT_S = 60;
const EXECUTE = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true } as const;

/**
 * Validates the optional owner session (touching it) and returns its id. Without one, an
 * authenticated (OAuth) caller still acts only through the shell's own session, which must be
 * theirs (`session_owner_mismatch` otherwise); unauthenticated callers keep the compatible form.
 */
async function owner(ctx: ToolContext, sid: string | null, shellId: string): Promise<string | null> {
  if (sid !== null) return ctx.requireSession(sid).session_id;
  if (!ctx.principal) return null;
  const shell = (await ctx.app.shells.list(null)).find((s) => s.shell_id === shellId);
  // An unknown shell is left to the manager, which answers shell_not_found.
  return shell?.session_id ? ctx.requireSession(shell.session_id).session_id : null;
}

/** Whether an authenticated caller started the session (never throws). */
function ownsSession(ctx: ToolContext, sid: string | null): boolean {
  if (sid === null) return false;
  try {
    ctx.app.sessions.requireFor(sid, ctx.principal);
    return true;
  } catch {
    return false;
  }
}

/** shell_not_found, saying so when the id is a background job's (the other kind of handle). */
async function withShellHint<T>(ctx: ToolContext, id: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof ToolError) || e.code !== "shell_not_found") throw e;
    let isJob = false;
    try {
      isJob = ctx.app.jobs.readRows().some((j) => j.job_id === id);
    } catch {
      // No job registry to consult: the plain error stands.
    }
    if (isJob) {
      throw new ToolError(
        "shell_not_found",
        `${id} is a background job, not a persistent shell: use job poll=["${id}"] (offset, wait_for) or ` +
          `job cancel=["${id}"]`,
        { shell_id: id, job_id: id },
      );
    }
    throw e;
  }
}

const ShellInfo = z.object({
  shell_id: z.string(),
  session_id: z.string().nullable(),
  name: z.string().nullable(),
  created: z.string(),
  attached: z.boolean(),
  backend: z.string(),
  status: z.enum(["running", "exited"]),
  exit_code: z.number().int().nullable(),
  cwd: z.string().nullable(),
  command: z.string().nullable(),
  cols: z.number().int(),
  rows: z.number().int(),
});

export const listPersistentShells = defineTool({
  name: "list_persistent_shells",
  title: "List persistent shells",
  description: listDescription,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ session_id: OwnerSession }),
  output: z.object({ shells: z.array(ShellInfo) }),
  async run(ctx, input) {
    if (input.session_id !== null)
      return { shells: await ctx.app.shells.list(ctx.requireSession(input.session_id).session_id) };
    const all = await ctx.app.shells.list(null);
    // An authenticated caller sees only the shells of sessions it started.
    return { shells: ctx.principal ? all.filter((s) => ownsSession(ctx, s.session_id)) : all };
  },
  compact: (o) => ({
    shells: o.shells.map((s) =>
      pick(s, ["shell_id", "status", "exit_code", "command", "session_id"], ["shell_id", "status"]),
    ),
  }),
  text: (o) =>
    o.shells.length
      ? o.shells
          .map(
            (s) =>
              `${s.shell_id} [${s.status}${s.exit_code !== null ? ` ${s.exit_code}` : ""}] ` +
              `session ${s.session_id} ${s.cols}x${s.rows} ${s.command ?? ""}`,
          )
          .join("\n")
      : "no persistent shells",
});

export const readPersistentShellOutput = defineTool({
  name: "read_persistent_shell_output",
  title: "Read persistent shell output",
  description: readDescription,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  timeoutS: (s) => Math.max(s.tool_timeout_s, MAX_WAIT_S + 10),
  input: z.object({
    shell_id: ShellId,
    lines: z.number().int().default(200),
    session_id: OwnerSession,
    offset: z.number().int().min(0).nullable().default(null),
    wait_for: z.string().min(1).max(500).nullable().default(null),
    wait_for_idle_ms: z
      .number()
      .int()
      .min(50)
      .max(MAX_WAIT_S * 1000)
      .nullable()
      .default(null),
    timeout_s: z.number().min(0).max(MAX_WAIT_S).default(10),
  }),
  output: z.object({
    shell_id: z.string(),
    output: z.string(),
    lines: z.number().int(),
    backend: z.string(),
    current_line: z.string(),
    next_offset: z.number().int(),
    truncated: z.boolean(),
    reset: z.boolean(),
    history_full: z.boolean(),
    status: z.enum(["running", "exited"]),
    exit_code: z.number().int().nullable(),
    matched: z.boolean().nullable(),
    idle: z.boolean().nullable(),
    timed_out: z.boolean(),
    waited_ms: z.number().int(),
  }),
  async run(ctx, input) {
    let waitFor: RegExp | null = null;
    if (input.wait_for !== null) {
      try {
        waitFor = new RegExp(input.wait_for, "m");
      } catch {
        throw new ToolError("regex_invalid", "wait_for is not a valid regular expression");
      }
    }
    const r = await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.read(input.shell_id, await owner(ctx, input.session_id, input.shell_id), {
        lines: Math.min(Math.max(1, input.lines), 50_000),
        offset: input.offset,
        waitFor,
        idleMs: input.wait_for_idle_ms,
        timeoutMs: input.wait_for !== null || input.wait_for_idle_ms !== null ? input.timeout_s * 1000 : 0,
        maxBytes: ctx.app.settings.max_output_bytes,
        signal: ctx.signal,
      }),
    );
    return { shell_id: input.shell_id, backend: "tmux", ...r };
  },
  compact: (o) =>
    // Status and match only when they say something: exited, or a wait that did not match.
    ({
      ...pick(
        { ...o, status: o.status === "exited" ? o.status : null },
        ["shell_id", "output", "current_line", "next_offset", "truncated", "reset", "status", "exit_code", "timed_out"],
        ["shell_id", "output", "next_offset"],
      ),
      ...(o.matched === false ? { matched: false } : {}),
    }),
  text: (o) => {
    const flags = [
      o.status === "exited" ? `exited ${o.exit_code ?? "?"}` : "",
      o.timed_out ? "wait timed out" : "",
      o.truncated ? "truncated" : "",
      o.reset ? "offset reset" : "",
    ].filter(Boolean);
    const body = [o.output, o.current_line].filter((x) => x !== "").join("\n");
    return `${body}\n[next_offset ${o.next_offset}${flags.length ? `; ${flags.join("; ")}` : ""}]`;
  },
});

export const sendPersistentShellInput = defineTool({
  name: "send_persistent_shell_input",
  title: "Send input to persistent shell",
  description: sendDescription,
  scopes: ["shell:read", "shell:execute"],
  annotations: EXECUTE,
  input: z.object({
    shell_id: ShellId,
    // Optional: sending only keys (Ctrl-C) needs no text, and then no Enter unless asked for.
    input_text: z.string().max(100_000).optional(),
    enter: z.boolean().nullable().default(null),
    keys: z.array(z.string().min(1).max(20)).max(64).default([]),
    session_id: OwnerSession,
  }),
  output: z.object({
    shell_id: z.string(),
    sent_bytes: z.number().int(),
    enter: z.boolean(),
    keys: z.array(z.string()),
  }),
  async run(ctx, input) {
    const keysOnly = input.input_text === undefined && input.keys.length > 0;
    const enter = input.enter ?? !keysOnly;
    const text = input.input_text ?? "";
    const r = await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.send(input.shell_id, await owner(ctx, input.session_id, input.shell_id), text, input.keys, enter),
    );
    return { shell_id: input.shell_id, enter, ...r };
  },
  compact: (o) => ({ shell_id: o.shell_id, sent_bytes: o.sent_bytes, enter: o.enter }),
  text: (o) =>
    `sent ${o.sent_bytes} ` +
    `bytes${o.keys.length ? ` and ${o.keys.join(" ")}` : ""}${o.enter ? " + Enter" : ""} to ${o.shell_id}`,
});

export const resizePersistentShell = defineTool({
  name: "resize_persistent_shell",
  title: "Resize persistent shell",
  description: resizeDescription,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  input: z.object({
    shell_id: ShellId,
    cols: z.number().int().min(20, "cols must be between 20 and 1600").max(1600, "cols must be between 20 and 1600"),
    rows: z.number().int().min(3, "rows must be between 3 and 500").max(500, "rows must be between 3 and 500"),
    session_id: OwnerSession,
  }),
  output: z.object({
    shell_id: z.string(),
    cols: z.number().int(),
    rows: z.number().int(),
    resized: z.boolean(),
    backend: z.string(),
  }),
  async run(ctx, input) {
    await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.resize(input.shell_id, await owner(ctx, input.session_id, input.shell_id), input.cols, input.rows),
    );
    return { shell_id: input.shell_id, cols: input.cols, rows: input.rows, resized: true, backend: "tmux" };
  },
});

export const killPersistentShell = defineTool({
  name: "kill_persistent_shell",
  title: "Kill persistent shell",
  description: killDescription,
  scopes: ["shell:read", "shell:execute"],
  annotations: EXECUTE,
  input: z.object({ shell_id: ShellId, session_id: OwnerSession }),
  output: z.object({ shell_id: z.string(), killed: z.boolean(), stderr: z.string(), backend: z.string() }),
  async run(ctx, input) {
    const r = await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.kill(input.shell_id, await owner(ctx, input.session_id, input.shell_id)),
    );
    return { shell_id: input.shell_id, backend: "tmux", ...r };
  },
  compact: (o) => pick(o, ["shell_id", "killed", "stderr"], ["shell_id", "killed"]),
  text: (o) => `${o.killed ? "killed" : "already gone:"} shell ${o.shell_id}${o.stderr ? `\n${o.stderr}` : ""}`,
});
