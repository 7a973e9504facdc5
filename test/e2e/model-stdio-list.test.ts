/**
 * What a stdio client's model reads before its first call (issue 31): only what this server offers
 * (no Agent Bridge with nothing configured, no remote sessions, no ChatGPT connector pair), within
 * 18 KiB of definitions, every schema in a dialect single-type clients accept, and nullable
 * arguments advertised as the server takes them (null allowed, default null).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import contract from "../fixtures/contract/tool-contract.json" with { type: "json" };
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";

/** Name, description and input schema: what a client hands its model for each tool. */
const DEFINITIONS_BUDGET_BYTES = 18 * 1024;
const BRIDGE = [
  "agent_config_status",
  "list_agent_mcp_servers",
  "list_agent_mcp_tools",
  "call_agent_mcp_tool",
  "list_agent_skills",
  "activate_agent_skill",
  "read_agent_skill_file",
];
const NOT_OFFERED = [
  ...BRIDGE,
  "remote_admin",
  "workspace_search",
  "fetch",
  "create_file_link",
  "list_file_links",
  "revoke_file_link",
];

type Schema = Record<string, unknown>;
type Listed = Awaited<ReturnType<McpHandle["client"]["listTools"]>>["tools"];

function* subSchemas(s: unknown, path: string): Generator<[string, Schema]> {
  if (s === null || typeof s !== "object" || Array.isArray(s)) return;
  const schema = s as Schema;
  yield [path, schema];
  for (const [k, v] of Object.entries((schema.properties ?? {}) as Record<string, unknown>))
    yield* subSchemas(v, `${path}.${k}`);
  for (const key of ["items", "additionalProperties"])
    if (schema[key] !== undefined) yield* subSchemas(schema[key], `${path}.${key}`);
  for (const key of ["anyOf", "oneOf", "allOf"])
    if (Array.isArray(schema[key]))
      for (const [i, b] of (schema[key] as unknown[]).entries()) yield* subSchemas(b, `${path}.${key}[${i}]`);
}

describe("stdio tools/list with no bridge configuration and no remote workers", () => {
  let dir: TempDir;
  let ws: string;
  let env: Record<string, string>;
  const lists = new Map<string, Listed>();

  beforeAll(async () => {
    dir = tempDir("lsm-stdio-list-");
    ws = join(dir.path, "ws");
    mkdirSync(ws);
    // No global Skills folder either: the user's own ~/.config must not decide what this lists.
    env = { XDG_CONFIG_HOME: join(dir.path, "xdg") };
    for (const [client, mode] of [
      ["claude-code", "auto"],
      ["some-agent", "auto"],
      ["some-agent", "full"],
    ] as const) {
      await using h = await connectStdio({
        workspace: ws,
        state: join(dir.path, "state"),
        clientName: client,
        env: { ...env, LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: mode },
      });
      lists.set(`${client}/${mode}`, (await h.client.listTools()).tools);
    }
  });
  afterAll(() => dir?.[Symbol.dispose]());

  test("no tool and no description for what is not offered", () => {
    const tools = lists.get("claude-code/auto")!;
    const names = tools.map((t) => t.name);
    for (const name of NOT_OFFERED) expect(names).not.toContain(name);
    const start = tools.find((t) => t.name === "session_start")!;
    expect(Object.keys(start.inputSchema.properties ?? {})).not.toContain("target");
    const mentions = tools
      .filter((t) => /remote|worker|machine|agent bridge|connector/i.test(t.description ?? ""))
      .map((t) => t.name);
    // audit_tail names `remote` as one of its operation filters only.
    expect(mentions.filter((n) => n !== "audit_tail")).toEqual([]);
  });

  test(`definitions stay within ${DEFINITIONS_BUDGET_BYTES} bytes`, () => {
    const tools = lists.get("claude-code/auto")!;
    const bytes = Buffer.byteLength(
      JSON.stringify(tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema }))),
    );
    console.log(`stdio definitions: ${tools.length} tools, ${bytes} bytes`);
    expect(bytes).toBeLessThanOrEqual(DEFINITIONS_BUDGET_BYTES);
  });

  test("no JSON Schema type array anywhere, in text-only, compact and full lists", () => {
    const problems: string[] = [];
    for (const [which, tools] of lists) {
      for (const t of tools) {
        for (const [path, s] of [
          ...subSchemas(t.inputSchema, `${which} ${t.name}.input`),
          ...subSchemas(t.outputSchema, `${which} ${t.name}.output`),
        ]) {
          if (Array.isArray(s.type)) problems.push(`${path}: ${JSON.stringify(s.type)}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  test("a nullable argument is advertised with its null branch and default null", () => {
    const tools = new Map(lists.get("claude-code/auto")!.map((t) => [t.name, t]));
    const problems: string[] = [];
    let nullable = 0;
    for (const ref of contract.tools as unknown as Array<{
      name: string;
      inputSchema: { properties?: Record<string, Schema> };
    }>) {
      const ours = tools.get(ref.name);
      if (!ours) continue;
      for (const [arg, s] of Object.entries(ref.inputSchema.properties ?? {})) {
        if (s.default !== null) continue;
        const advertised = (ours.inputSchema.properties as Record<string, Schema> | undefined)?.[arg];
        if (!advertised) continue;
        nullable++;
        const branches = (advertised.anyOf as Schema[] | undefined) ?? [];
        if (advertised.default !== null || !branches.some((b) => b.type === "null"))
          problems.push(`${ref.name}.${arg}: ${JSON.stringify(advertised)}`);
      }
    }
    expect(problems).toEqual([]);
    expect(nullable).toBeGreaterThan(20);
  });

  test("the Agent Bridge is listed once its config folder exists", async () => {
    const state = join(dir.path, "state-bridge");
    mkdirSync(join(state, "agent_config"), { recursive: true, mode: 0o700 });
    await using h = await connectStdio({ workspace: ws, state, env });
    const names = (await h.client.listTools()).tools.map((t) => t.name);
    for (const name of BRIDGE) expect(names).toContain(name);
  });
});
