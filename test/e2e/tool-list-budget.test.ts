import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import { connectHttp, type HttpServer, type McpHandle, startHttp, tempDir, type TempDir } from "../helpers/harness.ts";

/**
 * The tool list is what every client pays before its first call (the model reads it, SDK clients
 * compile its output schemas), so it has a budget, measured on the whole list (all 41 contract
 * tools, as Streamable HTTP offers them). Raise a budget only with a reason.
 * History: 84.8 KiB for 29 tools before the schemas were made compact; the Agent Bridge and
 * session_copy took the 41 tools to 52.8 KiB; output fields typed by one `type` keyword and tighter
 * descriptions brought them to 44.6 KiB; shared rules said once in the instructions, descriptions
 * that no longer restate what the input schema shows, and no `title` on our own tools brought them
 * under 40 KiB (docs/benchmarks.md, "Lean tool list"). Issue 31 gave every nullable argument its
 * null branch and `default: null` back and made nullable output fields `anyOf` (no type arrays for
 * single-type dialects): 41.6 KiB, hence 42 KiB.
 */
const TOOL_LIST_BUDGET_BYTES = 42 * 1024;
const INSTRUCTIONS_BUDGET_BYTES = 1536;
/**
 * What the SDK client's listTools() spends most of its time on is Ajv compiling the output
 * schemas, in proportion to the code Ajv generates (per typed field, more for `anyOf` and `enum`).
 * 96.6 KiB for the 41 tools with nullable fields as `type` lists; issue 31 made them `anyOf` (no
 * advertised schema may use a type list): 126 KiB, hence 128 KiB.
 */
const OUTPUT_VALIDATOR_CODE_BUDGET_BYTES = 128 * 1024;

type Schema = Record<string, unknown>;

/** Every sub-schema of a JSON Schema, with the path that leads to it. */
function* subSchemas(s: unknown, path: string): Generator<[string, Schema]> {
  if (s === null || typeof s !== "object" || Array.isArray(s)) return;
  const schema = s as Schema;
  yield [path, schema];
  for (const [k, v] of Object.entries((schema.properties ?? {}) as Record<string, unknown>))
    yield* subSchemas(v, `${path}.properties.${k}`);
  for (const key of ["items", "additionalProperties", "propertyNames", "not"])
    if (schema[key] !== undefined) yield* subSchemas(schema[key], `${path}.${key}`);
  for (const key of ["anyOf", "oneOf", "allOf"])
    if (Array.isArray(schema[key]))
      for (const [i, b] of (schema[key] as unknown[]).entries()) yield* subSchemas(b, `${path}.${key}[${i}]`);
}

describe("the advertised tool list", () => {
  let ws: TempDir;
  let state: TempDir;
  let server: HttpServer;
  let mcp: McpHandle;
  let tools: Awaited<ReturnType<McpHandle["client"]["listTools"]>>["tools"];

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    // As a client outside the text-first table sees it by default (compact output schemas).
    server = await startHttp({
      workspace: ws.path,
      state: state.path,
      env: { LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: "auto" },
    });
    mcp = await connectHttp(server.url);
    tools = (await mcp.client.listTools()).tools;
  });

  afterAll(async () => {
    await mcp?.close();
    await server?.stop();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  });

  test(`stays within ${TOOL_LIST_BUDGET_BYTES} bytes and the instructions within ${INSTRUCTIONS_BUDGET_BYTES}`, () => {
    expect(tools.length).toBe(41);
    const bytes = Buffer.byteLength(JSON.stringify({ tools }));
    expect(bytes).toBeLessThanOrEqual(TOOL_LIST_BUDGET_BYTES);
    expect(Buffer.byteLength(mcp.client.getInstructions() ?? "")).toBeLessThanOrEqual(INSTRUCTIONS_BUDGET_BYTES);
  });

  test(
    "single-type dialects: anyOf instead of type arrays " + "anywhere, no empty {} schema, no safe-integer bounds",
    () => {
      const problems: string[] = [];
      for (const tool of tools) {
        for (const [which, root] of [
          ["input", tool.inputSchema],
          ["output", tool.outputSchema],
        ] as const) {
          for (const [path, s] of subSchemas(root, `${tool.name}.${which}`)) {
            if (Array.isArray(s.type)) problems.push(`${path}: type array`);
            if (Object.keys(s).length === 0) problems.push(`${path}: {}`);
            if (
              Math.abs(Number(s.minimum)) === Number.MAX_SAFE_INTEGER ||
              Math.abs(Number(s.maximum)) === Number.MAX_SAFE_INTEGER
            )
              problems.push(`${path}: ±2^53 bound`);
            if (s.description !== undefined) problems.push(`${path}: description inside a schema`);
          }
        }
      }
      expect(problems).toEqual([]);
    },
  );

  test(
    "outputs: every top-level field typed by one `type` keyword, or anyOf single-type branches when it may be " +
      "null",
    () => {
      const jsonTypes = new Set(["string", "number", "integer", "boolean", "object", "array", "null"]);
      const problems: string[] = [];
      let fields = 0;
      for (const tool of tools) {
        const out = tool.outputSchema as Schema | undefined;
        if (!out) {
          problems.push(`${tool.name}: no output schema`);
          continue;
        }
        if (JSON.stringify(Object.keys(out).sort()) !== JSON.stringify(["properties", "type"]))
          problems.push(`${tool.name}: keywords ${Object.keys(out)}`);
        for (const [name, field] of Object.entries(out.properties as Record<string, Schema>)) {
          fields++;
          const branches = Array.isArray(field.anyOf) ? (field.anyOf as Schema[]) : [field];
          const types = branches.map((b) => (Object.keys(b).join() === "type" ? b.type : undefined));
          if (Object.keys(field).length !== 1) problems.push(`${tool.name}.${name}: ${JSON.stringify(field)}`);
          else if (
            types.length === 0 ||
            !types.every((t) => jsonTypes.has(t as string)) ||
            new Set(types).size !== types.length
          )
            problems.push(`${tool.name}.${name}: type ${JSON.stringify(field.type)}`);
        }
      }
      expect(problems).toEqual([]);
      expect(fields).toBeGreaterThan(100);
    },
  );

  test(
    `the SDK client's Ajv generates at most ${OUTPUT_VALIDATOR_CODE_BUDGET_BYTES} bytes of validators for the ` +
      `output schemas`,
    () => {
      // The SDK's own Ajv instance, with its options (strict off, all errors, formats), as the client
      // builds it; compiled functions print their generated source.
      const ajv = (new AjvJsonSchemaValidator() as unknown as { _ajv: { compile(s: object): { toString(): string } } })
        ._ajv;
      let bytes = 0;
      for (const tool of tools) if (tool.outputSchema) bytes += ajv.compile(tool.outputSchema).toString().length;
      expect(bytes).toBeGreaterThan(10_000);
      expect(bytes).toBeLessThanOrEqual(OUTPUT_VALIDATOR_CODE_BUDGET_BYTES);
    },
  );

  test("descriptions carry no line breaks that only wrap the source (paragraphs and list items keep theirs)", () => {
    // A line that continues a paragraph: neither a list item nor after a blank line or a list item.
    const wraps = (text: string) =>
      text
        .split("\n")
        .some(
          (line, i, lines) =>
            i > 0 && line !== "" && !line.startsWith("- ") && lines[i - 1] !== "" && !lines[i - 1]!.startsWith("- "),
        );
    const wrapped = tools.filter((t) => wraps(t.description ?? "")).map((t) => t.name);
    expect(wrapped).toEqual([]);
  });

  test("the session id schema is written once: one spelling, the pattern alone", () => {
    const spellings = new Set<string>();
    for (const tool of tools) {
      const sid = (tool.inputSchema.properties as Record<string, Schema> | undefined)?.session_id;
      if (!sid) continue;
      const plain = (
        Array.isArray(sid.anyOf) ? (sid.anyOf as Schema[]).find((b) => b.type === "string") : sid
      ) as Schema;
      spellings.add(JSON.stringify(plain));
    }
    expect([...spellings]).toEqual([JSON.stringify({ type: "string", pattern: "^[A-Za-z0-9]{8}$" })]);
  });

  test("a shell id's length bounds ride in its pattern's quantifier", () => {
    const kill = tools.find((t) => t.name === "kill_persistent_shell")!;
    expect((kill.inputSchema.properties as Record<string, Schema>).shell_id).toEqual({
      type: "string",
      pattern: "^[A-Za-z0-9_-]{1,64}$",
    });
  });

  test("our own tools carry no title (the name is the label); every tool keeps name, description and schemas", () => {
    for (const tool of tools) {
      expect(tool.title, tool.name).toBeUndefined();
      expect(tool.description!.length, tool.name).toBeGreaterThan(40);
      expect(tool.inputSchema.type, tool.name).toBe("object");
    }
  });

  test("output schemas type the top-level fields and leave deep parts open", () => {
    const start = tools.find((t) => t.name === "session_start")!;
    const props = start.outputSchema!.properties as Record<string, Schema>;
    expect(props.session_id).toEqual({ type: "string" });
    expect(props.environment).toEqual({ type: "object" });
    expect(props.expires_at).toEqual({ anyOf: [{ type: "number" }, { type: "null" }] });
    expect(props.target).toEqual({ type: "string" });
  });
});
