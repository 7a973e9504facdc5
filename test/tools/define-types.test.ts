import { describe, expect, test } from "bun:test";
import { z } from "zod";
import { type AnyTool, defineTool, READ_ONLY } from "../../src/tools/define.ts";

// Checked by `typecheck` (tsc): a tool's handler is typed by its own schemas, and the list type
// takes any tool without a cast. Each @ts-expect-error fails the typecheck if the error it marks
// ever stops being one.
const shape = { title: "Double", description: "doubles n", scopes: [], annotations: READ_ONLY } as const;
const input = z.object({ n: z.number() });
const output = z.object({ twice: z.number() });

const double = defineTool({ name: "double", ...shape, input, output, run: async (_ctx, a) => ({ twice: a.n * 2 }) });

// @ts-expect-error the handler reads an argument its input schema does not declare
defineTool({ name: "bad_input", ...shape, input, output, run: async (_ctx, a) => ({ twice: a.m }) });

// @ts-expect-error the handler returns what its output schema refuses
defineTool({ name: "bad_output", ...shape, input, output, run: async (_ctx, a) => ({ twice: String(a.n) }) });

describe("tool types", () => {
  test("a typed tool joins a list of any tools as it is", () => {
    const list: AnyTool[] = [double];
    expect(list[0]).toBe(double);
    expect(list[0]?.input.safeParse({ n: 2 }).success).toBe(true);
  });
});
