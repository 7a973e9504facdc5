import type { AnyTool } from "./define.ts";

/**
 * The one list of built-in tools: each entry names the tools a module defines and imports that
 * module on demand. A process that calls only a few tools (a remote worker running bash and reads)
 * imports only their modules, which saves an idle worker ~5 MiB; `serve` loads them all right after
 * the first tools/list (`builtinTools`), and the bundle-time manifest (schemas.macro.ts) is built
 * from the same list, in this order (the order of tools/list). test/tools/loaders.test.ts checks
 * that each entry's names are the names of the tools its module gives.
 *
 * Adding a tool: its module and its description beside it under the same name (one module per tool;
 * test/scripts/tool-files.test.ts checks the names), then one line here.
 */
type Entry = readonly [names: readonly string[], load: () => Promise<readonly AnyTool[]>];
const MODULES: readonly Entry[] = [
  [["session_start"], () => import("./sessions/session-start.ts").then((m) => [m.sessionStart])],
  [["session_change_cwd"], () => import("./sessions/session-change-cwd.ts").then((m) => [m.sessionChangeCwd])],
  [["session_end"], () => import("./sessions/session-end.ts").then((m) => [m.sessionEnd])],
  [["session_copy"], () => import("./sessions/session-copy.ts").then((m) => [m.sessionCopy])],
  [["bash"], () => import("./shell/bash.ts").then((m) => [m.bash])],
  [["version"], () => import("./meta/version.ts").then((m) => [m.version])],
  [["audit_tail"], () => import("./audit/audit-tail.ts").then((m) => [m.auditTail])],
  [["read"], () => import("./files/read.ts").then((m) => [m.read])],
  [["hashline_edit"], () => import("./files/hashline-edit.ts").then((m) => [m.hashlineEdit])],
  [["edit_lines"], () => import("./files/edit-lines.ts").then((m) => [m.editLines])],
  [["apply_patch"], () => import("./files/apply-patch.ts").then((m) => [m.applyPatch])],
  [["write_file"], () => import("./files/write-file.ts").then((m) => [m.writeFile])],
  [["delete_file_or_dir"], () => import("./files/delete.ts").then((m) => [m.deleteFileOrDir])],
  [["list_files"], () => import("./files/list-files.ts").then((m) => [m.listFiles])],
  [["tree_view"], () => import("./files/tree-view.ts").then((m) => [m.treeView])],
  [["glob_search"], () => import("./files/glob-search.ts").then((m) => [m.globSearch])],
  [["search"], () => import("./search/search.ts").then((m) => [m.search])],
  [["read_todos"], () => import("./todos/read-todos.ts").then((m) => [m.readTodos])],
  [["write_todos"], () => import("./todos/write-todos.ts").then((m) => [m.writeTodos])],
  [["view_image"], () => import("./media/view-image.ts").then((m) => [m.viewImage])],
  [["run_python_code"], () => import("./python/run-python-code.ts").then((m) => [m.runPythonCode])],
  [["secret_scan"], () => import("./files/secret-scan.ts").then((m) => [m.secretScan])],
  [["workspace_search"], () => import("./connector/workspace-search.ts").then((m) => [m.workspaceSearch])],
  [["fetch"], () => import("./connector/fetch.ts").then((m) => [m.fetchDocument])],
  [["job"], () => import("./shell/job.ts").then((m) => [m.job])],
  [["list_persistent_shells"], () => import("./shell/list-persistent-shells.ts").then((m) => [m.listPersistentShells])],
  [
    ["read_persistent_shell_output"],
    () => import("./shell/read-persistent-shell-output.ts").then((m) => [m.readPersistentShellOutput]),
  ],
  [
    ["send_persistent_shell_input"],
    () => import("./shell/send-persistent-shell-input.ts").then((m) => [m.sendPersistentShellInput]),
  ],
  [
    ["resize_persistent_shell"],
    () => import("./shell/resize-persistent-shell.ts").then((m) => [m.resizePersistentShell]),
  ],
  [["kill_persistent_shell"], () => import("./shell/kill-persistent-shell.ts").then((m) => [m.killPersistentShell])],
  [["create_file_link"], () => import("./links/create-file-link.ts").then((m) => [m.createFileLink])],
  [["list_file_links"], () => import("./links/list-file-links.ts").then((m) => [m.listFileLinks])],
  [["revoke_file_link"], () => import("./links/revoke-file-link.ts").then((m) => [m.revokeFileLink])],
  [["remote_admin"], () => import("./remote/remote-admin.ts").then((m) => [m.remoteAdmin])],
  [["agent_config_status"], () => import("./bridge/agent-config-status.ts").then((m) => [m.agentConfigStatus])],
  [["list_agent_mcp_servers"], () => import("./bridge/list-agent-mcp-servers.ts").then((m) => [m.listAgentMcpServers])],
  [["list_agent_mcp_tools"], () => import("./bridge/list-agent-mcp-tools.ts").then((m) => [m.listAgentMcpTools])],
  [["call_agent_mcp_tool"], () => import("./bridge/call-agent-mcp-tool.ts").then((m) => [m.callAgentMcpTool])],
  [["list_agent_skills"], () => import("./bridge/list-agent-skills.ts").then((m) => [m.listAgentSkills])],
  [["activate_agent_skill"], () => import("./bridge/activate-agent-skill.ts").then((m) => [m.activateAgentSkill])],
  [["read_agent_skill_file"], () => import("./bridge/read-agent-skill-file.ts").then((m) => [m.readAgentSkillFile])],
];

/** Each entry's names and the tools its module gives, in list order (for the test). */
export async function loadedEntries(): Promise<{ names: readonly string[]; tools: readonly AnyTool[] }[]> {
  return Promise.all(MODULES.map(async ([names, load]) => ({ names, tools: await load() })));
}

/** Every built-in tool, in the order tools/list gives them. */
export async function builtinTools(): Promise<AnyTool[]> {
  return (await loadedEntries()).flatMap((e) => e.tools);
}

/** The definition of one built-in tool, importing only its module; undefined for an unknown name. */
export async function loadTool(name: string): Promise<AnyTool | undefined> {
  const entry = MODULES.find(([names]) => names.includes(name));
  if (!entry) return undefined;
  return (await entry[1]()).find((d) => d.name === name);
}
