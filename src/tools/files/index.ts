import type { ToolDefinition } from "../define.ts";
import { applyPatch } from "./apply-patch.ts";
import { deleteFileOrDir } from "./delete.ts";
import { globSearch, listFiles, treeView } from "./discovery.ts";
import { search } from "../search/search.ts";
import { fetchDocument, workspaceSearch } from "../connector/connector.ts";
import { viewImage } from "../media/view-image.ts";
import { runPythonCode } from "../python/run-python-code.ts";
import { readTodos, writeTodos } from "../todos/todos.ts";
import { secretScan } from "./secret-scan.ts";
import { editLines } from "./edit-lines.ts";
import { hashlineEdit } from "./hashline-edit.ts";
import { read } from "./read.ts";
import { writeFile } from "./write-file.ts";

/** The workspace file tools (issue 3). */
export function fileTools(): ToolDefinition[] {
  return [
    read,
    hashlineEdit,
    editLines,
    applyPatch,
    writeFile,
    deleteFileOrDir,
    listFiles,
    treeView,
    globSearch,
    search,
    readTodos,
    writeTodos,
    viewImage,
    runPythonCode,
    secretScan,
    workspaceSearch,
    fetchDocument,
  ] as unknown as ToolDefinition[];
}
