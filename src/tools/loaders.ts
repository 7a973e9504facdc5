import type { ToolDefinition } from "./define.ts";

/**
 * One loader per built-in tool module, so a process that calls only a few tools (a remote worker
 * running bash and reads) imports only their modules instead of every tool at the first call
 * (tools/index.ts), which cost an idle worker ~5 MiB. `serve` still loads them all right after the
 * first tools/list. test/tools-loaders.test.ts keeps this table equal to builtinTools().
 */
type Loader = () => Promise<unknown[]>;
const MODULES: ReadonlyArray<readonly [readonly string[], Loader]> = [
  [["session_start"], () => import("./sessions/session-start.ts").then((m) => [m.sessionStart])],
  [["session_change_cwd"], () => import("./sessions/session-change-cwd.ts").then((m) => [m.sessionChangeCwd])],
  [["session_end"], () => import("./sessions/session-end.ts").then((m) => [m.sessionEnd])],
  [["session_copy"], () => import("./sessions/session-copy.ts").then((m) => [m.sessionCopy])],
  [["bash"], () => import("./shell/bash.ts").then((m) => [m.bash])],
  [["job"], () => import("./shell/job.ts").then((m) => [m.job])],
  [
    [
      "list_persistent_shells",
      "read_persistent_shell_output",
      "send_persistent_shell_input",
      "resize_persistent_shell",
      "kill_persistent_shell",
    ],
    () =>
      import("./shell/persistent-shells.ts").then((m) => [
        m.listPersistentShells,
        m.readPersistentShellOutput,
        m.sendPersistentShellInput,
        m.resizePersistentShell,
        m.killPersistentShell,
      ]),
  ],
  [["version"], () => import("./meta/version.ts").then((m) => [m.version])],
  [["audit_tail"], () => import("./audit/audit-tail.ts").then((m) => [m.auditTail])],
  [["read"], () => import("./files/read.ts").then((m) => [m.read])],
  [["hashline_edit"], () => import("./files/hashline-edit.ts").then((m) => [m.hashlineEdit])],
  [["edit_lines"], () => import("./files/edit-lines.ts").then((m) => [m.editLines])],
  [["apply_patch"], () => import("./files/apply-patch.ts").then((m) => [m.applyPatch])],
  [["write_file"], () => import("./files/write-file.ts").then((m) => [m.writeFile])],
  [["delete_file_or_dir"], () => import("./files/delete.ts").then((m) => [m.deleteFileOrDir])],
  [
    ["list_files", "tree_view", "glob_search"],
    () => import("./files/discovery.ts").then((m) => [m.listFiles, m.treeView, m.globSearch]),
  ],
  [["search"], () => import("./search/search.ts").then((m) => [m.search])],
  [["read_todos", "write_todos"], () => import("./todos/todos.ts").then((m) => [m.readTodos, m.writeTodos])],
  [["view_image"], () => import("./media/view-image.ts").then((m) => [m.viewImage])],
  [["run_python_code"], () => import("./python/run-python-code.ts").then((m) => [m.runPythonCode])],
  [["secret_scan"], () => import("./files/secret-scan.ts").then((m) => [m.secretScan])],
  [
    ["workspace_search", "fetch"],
    () => import("./connector/connector.ts").then((m) => [m.workspaceSearch, m.fetchDocument]),
  ],
  [["create_file_link"], () => import("./links/create-file-link.ts").then((m) => [m.createFileLink])],
  [["list_file_links"], () => import("./links/list-file-links.ts").then((m) => [m.listFileLinks])],
  [["revoke_file_link"], () => import("./links/revoke-file-link.ts").then((m) => [m.revokeFileLink])],
  [["remote_admin"], () => import("./remote/remote-admin.ts").then((m) => [m.remoteAdmin])],
  [
    [
      "agent_config_status",
      "list_agent_mcp_servers",
      "list_agent_mcp_tools",
      "call_agent_mcp_tool",
      "list_agent_skills",
      "activate_agent_skill",
      "read_agent_skill_file",
    ],
    () => import("./bridge/index.ts").then((m) => m.bridgeTools()),
  ],
];

/** Every tool name the table knows (for the test). */
export const LOADABLE_TOOLS: readonly string[] = MODULES.flatMap(([names]) => names);

/** The definition of one built-in tool, importing only its module; undefined for an unknown name. */
export async function loadTool(name: string): Promise<ToolDefinition | undefined> {
  const entry = MODULES.find(([names]) => names.includes(name));
  if (!entry) return undefined;
  const defs = (await entry[1]()) as ToolDefinition[];
  return defs.find((d) => d.name === name);
}
