/**
 * Every tool's result keeps the 4.3.0 contract in every structured_output mode (issue 31): one
 * scripted pass over all 41 tools through the compiled binary per mode, each successful
 * structuredContent validated against the contract's output schema with the SDK's own Ajv. `off`
 * sends no structured content at all (nothing a client could check against the contract), and
 * `full` advertises the whole output schema. The official client also checks every result against
 * the schema we advertised, so a compact form that breaks its own schema fails here too.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import contract from "../fixtures/contract/tool-contract.json" with { type: "json" };
import { fixtureServer, writeManifest } from "../bridge/helpers.ts";
import {
  connectHttp,
  type McpHandle,
  startHttp,
  stopStateLeftovers,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

type Schema = Record<string, unknown>;
const CONTRACT = new Map(
  (contract.tools as Array<{ name: string; outputSchema: Schema }>).map((t) => [t.name, t.outputSchema]),
);

/** A 1x1 PNG. */
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64",
);

interface Call {
  tool: string;
  result: CallToolResult;
}

/** Calls every tool at least once, the way a model would chain them; returns each call's result. */
async function callEveryTool(mcp: McpHandle): Promise<Call[]> {
  const calls: Call[] = [];
  const call = async (tool: string, args: Record<string, unknown> = {}) => {
    const result = (await mcp.call(tool, args)) as CallToolResult;
    calls.push({ tool, result });
    if (result.isError) throw new Error(`${tool} failed: ${JSON.stringify(result.content)}`);
    return result;
  };
  const textOf = (r: CallToolResult) => r.content.map((c) => (c.type === "text" ? c.text : "")).join("");
  /** The snapshot id in a `[path#id]` header of a text block. */
  const snapshotIn = (r: CallToolResult) => /\[[^\]#]+#([A-Za-z0-9]+)\]/.exec(textOf(r))?.[1] ?? "";

  await call("version");
  const started = textOf(await call("session_start", { workdir: "." }));
  const sid = /[A-Za-z0-9]{8}/.exec(/session_id[^A-Za-z0-9]*([A-Za-z0-9]{8})/.exec(started)?.[1] ?? started)?.[0] ?? "";
  expect(sid).toMatch(/^[A-Za-z0-9]{8}$/);
  await call("session_change_cwd", { session_id: sid, workdir: "proj" });
  await call("write_file", {
    session_id: sid,
    path: "a.py",
    content: "def total(xs):\n    return sum(xs)\n\n\nprint(total([1, 2]))\n",
  });
  const read = await call("read", { session_id: sid, path: "a.py" });
  await call("read", { session_id: sid, path: "." });
  const edited = await call("hashline_edit", {
    session_id: sid,
    input:
      `[proj/a.py#${snapshotIn(read)}]\n1:def total(xs):\n+def grand_total(xs):\n\n5:print(total([1, ` +
      `2]))\n+print(grand_total([1, 2]))`,
  });
  // The edit's fresh rows are the lines it wrote (1 and 5); line 2 is read again.
  expect(textOf(edited)).toContain("\n5:print(grand_total([1, 2]))");
  const line2 = await call("read", { session_id: sid, path: "a.py:2" });
  await call("edit_lines", {
    session_id: sid,
    path: "a.py",
    start_line: 2,
    end_line: 2,
    replacement: "    return sum(xs) + 0",
    snapshot_id: snapshotIn(line2),
  });
  await call("apply_patch", {
    session_id: sid,
    patch: "*** Begin Patch\n*** Update File: a.py\n@@\n-    return sum(xs) + 0\n+    return sum(xs)\n*** End Patch",
  });
  await call("list_files", { session_id: sid });
  await call("tree_view", { session_id: sid });
  await call("glob_search", { session_id: sid, pattern: "*.py" });
  await call("search", { session_id: sid, pattern: "grand_total" });
  await call("search", { session_id: sid, pattern: "grand_total", files_only: true });
  await call("write_todos", {
    session_id: sid,
    todos: [{ content: "rename total", status: "completed" }, { content: "run it" }],
  });
  await call("read_todos", { session_id: sid });
  await call("view_image", { session_id: sid, path: "dot.png" });
  await call("run_python_code", { session_id: sid, code: "print(6 * 7)" });
  await call("secret_scan", { session_id: sid });
  await call("bash", { session_id: sid, command: "python3 a.py" });
  const job = textOf(
    await call("bash", { session_id: sid, command: "echo started; sleep 30", async_: true, name: "napper" }),
  );
  const jobId = /job_id[^A-Za-z0-9]*([A-Za-z0-9_-]+)/.exec(job)?.[1] ?? /\b(j[A-Za-z0-9_-]+)\b/.exec(job)?.[1] ?? "";
  const jobs = (await mcp.call("job", { session_id: sid })) as CallToolResult;
  calls.push({ tool: "job", result: jobs });
  const listedJob = /\b([A-Za-z0-9]{6,})\b.*napper|napper.*?\b([A-Za-z0-9]{6,})\b/.exec(textOf(jobs));
  const id = jobId && textOf(jobs).includes(jobId) ? jobId : (listedJob?.[1] ?? listedJob?.[2] ?? "");
  expect(id).not.toBe("");
  await call("job", { session_id: sid, poll: [id], wait_for: "started", wait_s: 20 });
  await call("job", { session_id: sid, cancel: [id] });
  await call("job", { session_id: sid, retry: [id] });
  await call("job", { session_id: sid, cancel: [id] });
  const shell = textOf(await call("bash", { session_id: sid, command: "cat", pty: true, name: "echoer" }));
  const shellId =
    /\b(echoer[A-Za-z0-9_-]*|[A-Za-z0-9_-]*echoer)\b/.exec(shell)?.[1] ??
    /shell_id[^A-Za-z0-9_-]*([A-Za-z0-9_-]+)/.exec(shell)?.[1] ??
    "";
  expect(shellId).not.toBe("");
  await call("list_persistent_shells", { session_id: sid });
  await call("send_persistent_shell_input", { shell_id: shellId, input_text: "hello" });
  await call("read_persistent_shell_output", { shell_id: shellId, wait_for: "hello", timeout_s: 20 });
  await call("resize_persistent_shell", { shell_id: shellId, cols: 100, rows: 30 });
  await call("kill_persistent_shell", { shell_id: shellId });
  const other = textOf(await call("session_start", { workdir: "copy" }));
  const sid2 = /[A-Za-z0-9]{8}/.exec(/session_id[^A-Za-z0-9]*([A-Za-z0-9]{8})/.exec(other)?.[1] ?? other)?.[0] ?? "";
  await call("session_copy", { src_session_id: sid, src_path: "a.py", dst_session_id: sid2, dst_path: "a.py" });
  await call("delete_file_or_dir", { session_id: sid, path: "dot.png" });
  await call("audit_tail", { session_id: sid, limit: 5 });
  const link = textOf(await call("create_file_link", { session_id: sid, path: "a.py" }));
  const token = /\/download\/([A-Za-z0-9_-]+)/.exec(link)?.[1] ?? "";
  expect(token).not.toBe("");
  await call("list_file_links", { session_id: sid });
  await call("revoke_file_link", { session_id: sid, token });
  await call("remote_admin", { action: "list", args: {} });
  await call("agent_config_status");
  await call("list_agent_mcp_servers");
  await waitFor(async () => !(await mcp.call("list_agent_mcp_tools", { server: "up" })).isError, {
    what: "the upstream's tools",
  });
  await call("list_agent_mcp_tools", { server: "up" });
  await call("call_agent_mcp_tool", { server: "up", tool: "echo", args: { text: "hi" } });
  await call("list_agent_skills", { session_id: sid });
  await call("activate_agent_skill", { name: "tidy", session_id: sid });
  await call("read_agent_skill_file", { name: "tidy", path: "notes.md", session_id: sid });
  await call("workspace_search", { query: "grand_total" });
  await call("fetch", { id: "proj/a.py" });
  await call("session_end", { session_id: sid2 });
  await call("session_end", { session_id: sid });
  return calls;
}

test("the required fields compact keeps are the contract's (src/tools/contract-required.json is up to date)", () => {
  using out = tempDir("lsm-contract-required-");
  const file = join(out.path, "required.json");
  const script = join(import.meta.dir, "..", "..", "scripts", "contract-required.py");
  const run = Bun.spawnSync([
    "python3",
    script,
    join(import.meta.dir, "..", "fixtures", "contract", "tool-contract.json"),
    file,
  ]);
  expect(run.exitCode).toBe(0);
  const shipped = readFileSync(join(import.meta.dir, "..", "..", "src", "tools", "contract-required.json"), "utf8");
  expect(readFileSync(file, "utf8")).toBe(shipped);
});

describe("every tool's result keeps the 4.3.0 contract in every structured_output mode", () => {
  let dir: TempDir;
  const ajv = new AjvJsonSchemaValidator();

  beforeAll(() => {
    dir = tempDir("lsm-contract-modes-");
  });
  afterAll(() => dir?.[Symbol.dispose]());

  for (const mode of ["compact", "full", "off"] as const) {
    test(`${mode}: all 41 tools called, every structured result valid against the contract`, async () => {
      const ws = join(dir.path, mode, "ws");
      const state = join(dir.path, mode, "state");
      mkdirSync(join(ws, "proj"), { recursive: true });
      mkdirSync(join(ws, "copy"));
      writeFileSync(join(ws, "proj", "dot.png"), PNG);
      mkdirSync(join(ws, "proj", ".agents", "skills", "tidy"), { recursive: true });
      writeFileSync(
        join(ws, "proj", ".agents", "skills", "tidy", "SKILL.md"),
        "---\ndescription: Keep code tidy\n---\n# Tidy\nFormat before committing.\n",
      );
      writeFileSync(join(ws, "proj", ".agents", "skills", "tidy", "notes.md"), "notes\n");
      writeManifest(state, { version: 1, mcpServers: { up: fixtureServer() } });
      await using server = await startHttp({ workspace: ws, state, env: { LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: mode } });
      await using mcp = await connectHttp(server.url);
      try {
        const listed = (await mcp.client.listTools()).tools;
        // The contract's 41 tools, besides the bridge's dynamic ones (a Skill's own tool).
        expect(
          listed
            .map((t) => t.name)
            .filter((n) => CONTRACT.has(n))
            .sort(),
        ).toEqual([...CONTRACT.keys()].sort());
        for (const t of listed.filter((l) => CONTRACT.has(l.name))) {
          if (mode === "off") expect(t.outputSchema, t.name).toBeUndefined();
          // `full` advertises the whole schema: the contract's required fields are listed in it.
          if (mode === "full") {
            const required = (t.outputSchema as Schema).required as string[] | undefined;
            for (const field of (CONTRACT.get(t.name)!.required as string[] | undefined) ?? [])
              expect(required ?? [], `${t.name}.${field}`).toContain(field);
          }
        }
        const calls = await callEveryTool(mcp);
        expect(new Set(calls.map((c) => c.tool)).size).toBe(41);
        const problems: string[] = [];
        for (const { tool, result } of calls) {
          if (result.isError) continue;
          if (mode === "off") {
            if (result.structuredContent !== undefined) problems.push(`${tool}: structured content in off`);
            continue;
          }
          const verdict = ajv.getValidator(CONTRACT.get(tool)!)(result.structuredContent);
          if (!verdict.valid) problems.push(`${tool}: ${verdict.errorMessage}`);
        }
        expect(problems).toEqual([]);
      } finally {
        stopStateLeftovers(state);
      }
    }, 240_000);
  }
});
