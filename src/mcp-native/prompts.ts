import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { type Caller, ownedSession, requireScope } from "./access.ts";

/** Runs one of our tools for the caller (scope check, audit, output schema) and gives its structured output. */
export type RunTool = (name: string, args: Record<string, unknown>) => Promise<Record<string, unknown>>;

export interface PromptArgument {
  name: string;
  description: string;
  required: boolean;
}

export interface PromptInfo {
  name: string;
  title: string;
  description: string;
  arguments: PromptArgument[];
}

export interface PromptMessage {
  role: "user";
  content: { type: "text"; text: string };
}

const SESSION_ARG: PromptArgument = {
  name: "session_id",
  description: "The agent session to work in (from session_start).",
  required: true,
};
/** Skill prompts are `skill_<name>`; Skill names are lowercase letters, digits and hyphens. */
const SKILL_PREFIX = "skill_";
/** Top-level entries an orientation prompt names at most. */
const MAX_ENTRIES = 100;
/** Bytes of a project file (package.json, Makefile) read to find a test command. */
const MAX_MARKER_BYTES = 256 * 1024;

const OWN_PROMPTS: PromptInfo[] = [
  {
    name: "orient_repository",
    title: "Orient in a repository",
    description:
      "Start work in a session's workdir: what is there, what kind of project it is, and how to find one's way.",
    arguments: [SESSION_ARG],
  },
  {
    name: "run_tests",
    title: "Run the tests",
    description: "Run the project's tests in a session, with the test command found from its project files.",
    arguments: [
      SESSION_ARG,
      { name: "filter", description: "Only tests whose name or file matches this (optional).", required: false },
    ],
  },
];

/** prompts/list: our own prompts, then one per Agent Skill when the Agent Bridge offers Skills. */
export async function listPrompts(caller: Caller, runTool: RunTool): Promise<{ prompts: PromptInfo[] }> {
  requireScope(caller, "shell:read");
  return { prompts: [...OWN_PROMPTS, ...(await skillPrompts(caller, runTool))] };
}

async function skillPrompts(caller: Caller, runTool: RunTool): Promise<PromptInfo[]> {
  if (!caller.app.settings.agent_bridge_enabled || !caller.app.bridge) return [];
  let skills: Array<{ name: string; description: string }>;
  try {
    skills = (await runTool("list_agent_skills", { session_id: null })).skills as typeof skills;
  } catch {
    // No manifest, an invalid one, Skills turned off: no Skill prompts, our own still listed.
    return [];
  }
  return skills.map((s) => ({
    name: `${SKILL_PREFIX}${s.name}`,
    title: `Skill: ${s.name}`,
    description: s.description,
    arguments: [
      { name: "task", description: "What to use the Skill for (optional).", required: false },
      { name: "session_id", description: "Look the Skill up from this session's workdir (optional).", required: false },
    ],
  }));
}

function message(text: string): PromptMessage {
  return { role: "user", content: { type: "text", text } };
}

function argument(args: Record<string, string> | undefined, name: string, required: boolean): string | undefined {
  const v = args?.[name];
  if (v === undefined || v === "") {
    if (required) throw new ToolError("invalid_arguments", `prompt argument ${name} is required`, { argument: name });
    return undefined;
  }
  if (v.length > 4096)
    throw new ToolError("invalid_arguments", `prompt argument ${name} is longer than 4096 characters`, {
      argument: name,
    });
  return v;
}

/** prompts/get. */
export async function getPrompt(
  caller: Caller,
  name: string,
  args: Record<string, string> | undefined,
  runTool: RunTool,
): Promise<{ description: string; messages: PromptMessage[] }> {
  requireScope(caller, "shell:read");
  if (name === "orient_repository") return orientPrompt(caller, argument(args, "session_id", true)!);
  if (name === "run_tests")
    return testPrompt(caller, argument(args, "session_id", true)!, argument(args, "filter", false));
  if (name.startsWith(SKILL_PREFIX) && caller.app.bridge) {
    const skill = name.slice(SKILL_PREFIX.length);
    const sid = argument(args, "session_id", false) ?? null;
    const task = argument(args, "task", false);
    const out = await runTool("activate_agent_skill", { name: skill, session_id: sid });
    const purpose = task ? ` for this task: ${task}` : "";
    const intro = `Use the Agent Skill "${skill}"${purpose}. Its instructions follow (SKILL.md).`;
    const related = (out.related_files as string[]).length
      ? `\n\nFiles of the Skill (read_agent_skill_file reads them): ${(out.related_files as string[]).join(", ")}`
      : "";
    return {
      description: String(out.description),
      messages: [message(`${intro}\n\n${String(out.content)}${related}`)],
    };
  }
  throw new ToolError(
    "prompt_not_found",
    `no prompt named ${JSON.stringify(name.slice(0, 200))}; prompts/list shows them`,
  );
}

/** The workdir's top-level names, folders marked with a slash, sorted, at most MAX_ENTRIES. */
function topLevel(workdir: string): { names: string[]; more: number } {
  let entries;
  try {
    entries = readdirSync(workdir, { withFileTypes: true });
  } catch {
    return { names: [], more: 0 };
  }
  const names = entries.map((e) => (e.isDirectory() ? `${e.name}/` : e.name)).sort();
  return { names: names.slice(0, MAX_ENTRIES), more: Math.max(0, names.length - MAX_ENTRIES) };
}

function orientPrompt(caller: Caller, sid: string): { description: string; messages: PromptMessage[] } {
  const session = ownedSession(caller, sid);
  const { names, more } = topLevel(session.workdir);
  const listing = names.length ? names.join("\n") + (more ? `\n… and ${more} more` : "") : "(empty)";
  const tests = testCommand(session.workdir);
  const text = [
    `You are working in agent session ${sid}. Its workdir holds:`,
    "",
    listing,
    "",
    "Orient yourself before changing anything:",
    "1. Read the README and any contributor or architecture notes (read, tree_view).",
    "2. Find the entry points and how the project is built (package manifests, Makefile, build scripts).",
    tests
      ? `3. The tests seem to run with \`${tests}\`; run them once with bash to see where things stand.`
      : "3. Find out how the tests run and run them once with bash.",
    "4. Summarise the layout, the build and the test state in a few lines, then say what you would do next.",
  ].join("\n");
  return { description: `Orientation in session ${sid}`, messages: [message(text)] };
}

function readSmall(path: string): string | undefined {
  try {
    const st = statSync(path);
    if (!st.isFile() || st.size > MAX_MARKER_BYTES) return undefined;
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** The test command a project's files point to, checked in a fixed order; undefined when none does. */
export function testCommand(workdir: string): string | undefined {
  const pkg = readSmall(join(workdir, "package.json"));
  if (pkg !== undefined) {
    try {
      const scripts = (JSON.parse(pkg) as { scripts?: Record<string, unknown> }).scripts;
      if (typeof scripts?.test === "string")
        return existsSync(join(workdir, "bun.lock")) || existsSync(join(workdir, "bun.lockb"))
          ? "bun run test"
          : "npm test";
    } catch {
      // An unreadable package.json says nothing.
    }
  }
  if (existsSync(join(workdir, "Cargo.toml"))) return "cargo test";
  if (existsSync(join(workdir, "go.mod"))) return "go test ./...";
  if (["pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini"].some((f) => existsSync(join(workdir, f))))
    return "python -m pytest";
  const make = readSmall(join(workdir, "Makefile"));
  if (make !== undefined && /^test\s*:/m.test(make)) return "make test";
  return undefined;
}

function testPrompt(
  caller: Caller,
  sid: string,
  filter: string | undefined,
): { description: string; messages: PromptMessage[] } {
  const session = ownedSession(caller, sid);
  const command = testCommand(session.workdir);
  const narrow = filter ? `; narrow it to the tests matching "${filter}" the way this test runner does` : "";
  const how = command
    ? `The project's files point to \`${command}\`${narrow}.`
    : `No test command was found from the project files; find it in the README, the CI configuration ` +
      `and the build files${narrow}.`;
  const text = [
    `Run the tests in agent session ${sid}.`,
    how,
    "Run it with the bash tool (as a background job with the job tool if it takes longer than a minute).",
    "Report how many tests passed and failed; for each failure give the test, the assertion and the most likely cause.",
    "Do not change code to make a test pass unless asked to.",
  ].join("\n");
  return { description: `Run the tests in session ${sid}`, messages: [message(text)] };
}
