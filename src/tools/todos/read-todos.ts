import { z } from "zod";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import description from "./read-todos.md" with { type: "text" };
import { loadTodoList, TodoList } from "./todo-list.ts";

export const readTodos = defineTool({
  name: "read_todos",
  title: "Read todo list",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ session_id: SessionId }),
  output: TodoList,
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    return loadTodoList(ctx.app, session.session_id);
  },
  text: (o) =>
    `${
      o.todos.length
        ? o.todos.map((t) => `[${t.status}] (${t.priority}) ${t.id}: ${t.content}`).join("\n")
        : "(no todos)"
    }\nrevision ${o.revision}`,
});
