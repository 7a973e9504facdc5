import { join } from "node:path";
import { z } from "zod";
import { readJsonWithBackup } from "../../store/atomic.ts";
import type { AppServices } from "../context.ts";

/** A stored item: the four normalised fields plus whatever else the client sent, kept as is. */
const TodoItem = z.looseObject({ id: z.string(), content: z.string(), status: z.string(), priority: z.string() });
export const TodoList = z.object({
  revision: z.number().int().min(0),
  updated_at: z.number().nullable(),
  todos: z.array(TodoItem),
});
export type TodoList = z.infer<typeof TodoList>;

/** A session's stored list (empty before the first write); also what the Human UI shows. */
export function loadTodoList(app: AppServices, sid: string): TodoList {
  const file = join(app.sessions.root, sid, "todos.json");
  const r = readJsonWithBackup(file, (v) => TodoList.parse(v), app.settings.max_todo_bytes * 2 + 1024);
  return r.status === "ok" ? r.value : { revision: 0, updated_at: null, todos: [] };
}
