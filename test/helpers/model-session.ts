/**
 * A scripted, realistic working session against the fixture project in test/fixtures/shop, as a
 * model would drive it: orient, fix a bug, run a background server and poll it until ready, use a
 * REPL in a persistent shell, and rename a function across files. Each call records the bytes a
 * structured-first client would hand the model (the JSON of structuredContent when present, else
 * the text) and the bytes of the text block. Used by test/e2e/model-session.test.ts and
 * scripts/bench/context.ts.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { cpSync } from "node:fs";
import { join, resolve } from "node:path";
import type { McpHandle } from "./harness.ts";

export const FIXTURE = resolve(import.meta.dir, "..", "fixtures", "shop");

export interface CallRecord {
  tool: string;
  isError: boolean;
  /** Bytes of JSON.stringify(structuredContent) when present, else of the text blocks. */
  structuredFirst: number;
  /** Bytes of the text blocks. */
  text: number;
  structured: Record<string, unknown> | undefined;
  textBody: string;
}

export function textOf(r: CallToolResult): string {
  return r.content.map((c) => (c.type === "text" ? c.text : "")).join("");
}

/** What a structured-first client (Claude Code, Codex, …) passes to the model for one result. */
export function structuredFirstBytes(r: CallToolResult): number {
  if (r.structuredContent !== undefined) return Buffer.byteLength(JSON.stringify(r.structuredContent));
  return Buffer.byteLength(textOf(r));
}

/** Copies the fixture project to `dir/shop` and returns that path. */
export function copyFixture(dir: string): string {
  const dest = join(dir, "shop");
  cpSync(FIXTURE, dest, { recursive: true });
  return dest;
}

async function waitForText(
  h: McpHandle,
  tool: string,
  args: Record<string, unknown>,
  want: RegExp,
  record: (tool: string, r: CallToolResult) => CallToolResult,
): Promise<string> {
  // Bounded retries of a real tool call (the shell output appears asynchronously).
  const deadline = Date.now() + 20_000;
  for (;;) {
    const text = textOf(record(tool, await h.call(tool, args)));
    if (want.test(text)) return text;
    if (Date.now() > deadline) throw new Error(`${tool} never showed ${want}: ${text}`);
    await Bun.sleep(200);
  }
}

/**
 * Runs the session in `workdir` (a copy of the fixture inside the server's workspace root) and
 * returns one record per call. Throws when a step that must succeed fails, so the measured session
 * is always the complete one.
 */
export async function runModelSession(h: McpHandle, workdir: string): Promise<CallRecord[]> {
  const records: CallRecord[] = [];
  const record = (tool: string, r: CallToolResult) => {
    records.push({
      tool,
      isError: r.isError === true,
      structuredFirst: structuredFirstBytes(r),
      text: Buffer.byteLength(textOf(r)),
      structured: r.structuredContent as Record<string, unknown> | undefined,
      textBody: textOf(r),
    });
    return r;
  };
  const call = async (tool: string, args: Record<string, unknown>) => record(tool, await h.call(tool, args));
  const must = async (tool: string, args: Record<string, unknown>) => {
    const r = await call(tool, args);
    if (r.isError) throw new Error(`${tool} failed: ${textOf(r)}`);
    return r;
  };

  const started = await must("session_start", { workdir });
  const sid =
    /session_id: (\w{8})/.exec(textOf(started))?.[1] ??
    (started.structuredContent as { session_id: string }).session_id;
  const s = { session_id: sid };

  // Task 1: find and fix the discount bug.
  await must("read", { ...s, path: "." });
  await must("read", { ...s, path: "README.md" });
  await must("bash", { ...s, command: "python3 -m unittest -q 2>&1 | tail -n 20" });
  await must("search", { ...s, pattern: "def (apply_discount|compute_total)" });
  const pricing = textOf(await must("read", { ...s, path: "shop/pricing.py" }));
  const header = /^\[[^\]]+\]/.exec(pricing)?.[0];
  const buggy = /^(\d+):(.*price \* \(1 - percent\).*)$/m.exec(pricing);
  if (!header || !buggy) throw new Error(`unexpected read output: ${pricing}`);
  await must("hashline_edit", {
    ...s,
    input: `${header}\n${buggy[1]}:${buggy[2]}\n+${buggy[2]!.replace("(1 - percent)", "(1 - percent / 100)")}`,
  });
  await must("bash", { ...s, command: "python3 -m unittest -q 2>&1 | tail -n 3" });
  await must("bash", { ...s, command: "git status --short 2>/dev/null; ls shop" });

  // Task 2: a background server, polled until it is ready, queried, then stopped.
  const job = await must("bash", { ...s, command: "python3 -u server.py", async_: true, name: "server" });
  const jobId = /job_id\W+([\w.-]+)/.exec(textOf(job))?.[1];
  if (!jobId) throw new Error(`no job id in ${textOf(job)}`);
  const ready = await waitForText(
    h,
    "job",
    { ...s, poll: [jobId], wait_for: "ready on port", wait_s: 15 },
    /ready on port \d+/,
    record,
  );
  const port = /ready on port (\d+)/.exec(ready)![1];
  await must("bash", { ...s, command: `curl -s http://127.0.0.1:${port}/` });
  await must("job", { ...s, list_jobs: true });
  await must("job", { ...s, cancel: [jobId] });

  // A REPL in a persistent shell.
  const shell = await must("bash", { ...s, command: "python3 -q", pty: true, name: "repl" });
  const shellId = /shell_id\W+([\w.-]+)/.exec(textOf(shell))?.[1];
  if (!shellId) throw new Error(`no shell id in ${textOf(shell)}`);
  await waitForText(
    h,
    "read_persistent_shell_output",
    { ...s, shell_id: shellId, lines: 20, wait_for: ">>>", timeout_s: 15 },
    />>>/,
    record,
  );
  await must("send_persistent_shell_input", {
    ...s,
    shell_id: shellId,
    input_text: "from shop.cart import Cart; c = Cart(); c.add(4, 2.5); print(c.total(20))",
    enter: true,
  });
  await waitForText(
    h,
    "read_persistent_shell_output",
    { ...s, shell_id: shellId, lines: 20, wait_for: "^8\\.0$", timeout_s: 15 },
    /^8\.0$/m,
    record,
  );
  await must("list_persistent_shells", {});
  // Leave the REPL as a person would, read its last output, then remove the shell.
  await must("send_persistent_shell_input", { ...s, shell_id: shellId, input_text: "exit()", enter: true });
  await waitForText(
    h,
    "read_persistent_shell_output",
    { ...s, shell_id: shellId, lines: 20, wait_for_idle_ms: 300, timeout_s: 10 },
    /exited|exit \d/,
    record,
  );
  await must("kill_persistent_shell", { ...s, shell_id: shellId });

  // Task 3: rename compute_total to order_total across files.
  await must("search", { ...s, pattern: "compute_total", regex: false });
  await must("bash", {
    ...s,
    command: "grep -rl --include='*.py' compute_total . | xargs sed -i 's/\\bcompute_total\\b/order_total/g'",
  });
  await must("search", { ...s, pattern: "order_total", regex: false });
  await must("bash", { ...s, command: "python3 -m unittest -q 2>&1 | tail -n 3" });
  const cart = textOf(await must("read", { ...s, path: "shop/cart.py" }));

  // Task 4: plan the rest, rename an attribute with one multi-hunk edit, list the files it touches.
  await must("write_todos", {
    ...s,
    todos: [
      { content: "fix the discount bug", status: "completed" },
      { content: "rename compute_total to order_total", status: "completed" },
      { content: "rename Cart.items to Cart.lines", status: "in_progress" },
      { content: "run the tests", status: "pending" },
    ],
  });
  const cartHeader = /^\[[^\]]+\]/.exec(cart)?.[0];
  const rows = [...cart.matchAll(/^(\d+):(.*self\.items.*)$/gm)];
  if (!cartHeader || rows.length < 3) throw new Error(`unexpected read output: ${cart}`);
  const hunks = rows.map((r) => `${r[1]}:${r[2]}\n+${r[2]!.replace("self.items", "self.lines")}`);
  await must("hashline_edit", { ...s, input: `${cartHeader}\n${hunks.join("\n\n")}` });
  await must("search", { ...s, pattern: "order_total|self\\.lines", files_only: true });
  await must("bash", { ...s, command: "python3 -m unittest -q 2>&1 | tail -n 3" });

  await must("session_end", { ...s });
  return records;
}

export interface SessionTotals {
  calls: number;
  structuredFirst: number;
  text: number;
  ratio: number;
}

export function totals(records: CallRecord[], tools?: readonly string[]): SessionTotals {
  const picked = tools ? records.filter((r) => tools.includes(r.tool)) : records;
  const structuredFirst = picked.reduce((n, r) => n + r.structuredFirst, 0);
  const text = picked.reduce((n, r) => n + r.text, 0);
  return { calls: picked.length, structuredFirst, text, ratio: text ? structuredFirst / text : 0 };
}

type Schema = {
  $ref?: string;
  $defs?: Record<string, Schema>;
  definitions?: Record<string, Schema>;
  type?: string | string[];
  anyOf?: Schema[];
  oneOf?: Schema[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
};

/**
 * `value` cut down to what `schema` requires, at every depth: the least any result could carry and
 * still validate. It gives the floor under what `compact` can cost against the text.
 */
export function requiredOnly(value: unknown, schema: Schema, root: Schema = schema): unknown {
  let s: Schema | undefined = schema;
  while (s?.$ref) s = (root.$defs ?? root.definitions)?.[s.$ref.split("/").pop() ?? ""];
  if (!s) return value;
  const branches = s.anyOf ?? s.oneOf;
  if (branches) {
    const kind = value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
    const branch = branches.find((b) => {
      let r: Schema | undefined = b;
      while (r?.$ref) r = (root.$defs ?? root.definitions)?.[r.$ref.split("/").pop() ?? ""];
      return r?.type === kind || (kind === "object" && r?.properties !== undefined);
    });
    return branch ? requiredOnly(value, branch, root) : value;
  }
  if (Array.isArray(value)) return s.items ? value.map((v) => requiredOnly(v, s.items as Schema, root)) : value;
  if (value && typeof value === "object") {
    const kept: Record<string, unknown> = {};
    for (const key of s.required ?? []) {
      if (key in value)
        kept[key] = requiredOnly((value as Record<string, unknown>)[key], s.properties?.[key] ?? {}, root);
    }
    return kept;
  }
  return value;
}
