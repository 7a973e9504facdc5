import type { ToolDefinition } from "../define.ts";
import { deleteFileOrDir } from "./delete.ts";
import { editLines } from "./edit-lines.ts";
import { hashlineEdit } from "./hashline-edit.ts";
import { read } from "./read.ts";
import { writeFile } from "./write-file.ts";

/** The workspace file tools (issue 3). */
export function fileTools(): ToolDefinition[] {
  return [read, hashlineEdit, editLines, writeFile, deleteFileOrDir] as unknown as ToolDefinition[];
}
