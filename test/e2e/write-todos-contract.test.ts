/**
 * Item 11 of issue 9 (write_todos): items are free-form objects as the tool contract declares.
 * `content` is required, `status` and `priority` are free strings, and unknown fields are kept and
 * returned by read_todos.
 */
import { expect, test } from "bun:test";
import { openStdioSession } from "../helpers/harness.ts";

test("write_todos keeps free-form fields and free status strings, and requires content", async () => {
  await using session = await openStdioSession();
  const { mcp, sid } = session;
  const items = [
    {
      content: "ship it",
      status: "blocked",
      priority: "p0",
      owner: "ana",
      tags: ["release", "ui"],
      estimate: { hours: 3 },
    },
    { id: 7, content: "write docs", activeForm: "Writing docs" },
  ];
  const written = await mcp.ok<{ revision: number; todos: Array<Record<string, unknown>> }>("write_todos", {
    session_id: sid,
    todos: items,
  });
  expect(written.revision).toBe(1);
  const read = await mcp.ok<{ todos: Array<Record<string, unknown>> }>("read_todos", { session_id: sid });
  expect(read.todos).toEqual([
    {
      id: "1",
      content: "ship it",
      status: "blocked",
      priority: "p0",
      owner: "ana",
      tags: ["release", "ui"],
      estimate: { hours: 3 },
    },
    { id: "7", content: "write docs", status: "pending", priority: "medium", activeForm: "Writing docs" },
  ]);
  // content is the one required field; the refusal names it.
  const missing = await mcp.call("write_todos", {
    session_id: sid,
    todos: [{ status: "pending", note: "no content" }],
  });
  expect(missing.isError).toBe(true);
  expect(JSON.stringify(missing.content)).toContain("content");
  expect((await mcp.ok<{ todos: unknown[] }>("read_todos", { session_id: sid })).todos.length).toBe(2);
});
