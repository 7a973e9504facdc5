import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { writeJsonWithBackup } from "../../store/atomic.ts";
import { withFileLock } from "../../store/lock.ts";
import { SessionId } from "../common.ts";
import type { ToolContext } from "../context.ts";
import { defineTool } from "../define.ts";
import { loadTodoList, TodoList } from "./todo-list.ts";
import description from "./write-todos.md" with { type: "text" };

function todoFile(ctx: ToolContext, sid: string): string {
  return join(ctx.app.sessions.root, sid, "todos.json");
}

/**
 * A free-form item as the tool contract declares: `content` is required; `status` and `priority`
 * are free strings (the usual values are suggested in the description, not enforced); any other
 * field is kept and returned by read_todos.
 */
const InputItem = z.looseObject({
  id: z.union([z.string().max(200), z.number().int()]).optional(),
  content: z.string().max(10_000),
  status: z.string().max(100).optional(),
  priority: z.string().max(100).optional(),
});

export const writeTodos = defineTool({
  name: "write_todos",
  title: "Replace todo list",
  description,
  scopes: ["shell:read", "shell:write"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  input: z.object({
    session_id: SessionId,
    todos: z.array(InputItem),
    expected_revision: z.number().int().min(0).nullable().default(null),
  }),
  output: TodoList,
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const { settings } = ctx.app;
    if (input.todos.length > settings.max_todos)
      throw new ToolError(
        "todo_limit_reached",
        `Refusing to write ${input.todos.length} todos; max is ${settings.max_todos}`,
      );
    const todos = input.todos.map((t, i) => ({
      ...t,
      id: t.id === undefined ? String(i + 1) : String(t.id),
      content: t.content,
      status: t.status ?? "pending",
      priority: t.priority ?? "medium",
    }));
    const ids = new Set(todos.map((t) => t.id));
    if (ids.size !== todos.length) throw new ToolError("invalid_arguments", "todo ids must be unique");
    const dir = join(ctx.app.sessions.root, session.session_id);
    if (!existsSync(dir)) throw new ToolError("session_not_found", "session state is gone; call session_start again");
    return withFileLock(join(dir, ".todos.lock"), () => {
      const cur = loadTodoList(ctx.app, session.session_id);
      if (input.expected_revision !== null && input.expected_revision !== cur.revision) {
        throw new ToolError(
          "todo_conflict",
          `Todo list changed from revision ${input.expected_revision} to ${cur.revision}; reload before saving`,
          { revision: cur.revision },
        );
      }
      const next: TodoList = { revision: cur.revision + 1, updated_at: Date.now() / 1000, todos };
      const bytes = Buffer.byteLength(JSON.stringify(next));
      if (bytes > settings.max_todo_bytes)
        throw new ToolError(
          "todos_too_large",
          `Refusing to write ${bytes} todo bytes; max is ${settings.max_todo_bytes}`,
        );
      writeJsonWithBackup(todoFile(ctx, session.session_id), next);
      return next;
    });
  },
  text: (o) => `saved ${o.todos.length} todo(s), revision ${o.revision}`,
});
