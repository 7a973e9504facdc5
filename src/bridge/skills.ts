import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";

export type SkillSourceName = "project" | "managed" | "global";

export interface SkillSource {
  source: SkillSourceName;
  path: string;
}

export interface Skill {
  name: string;
  source: SkillSourceName;
  source_path: string;
  entry_path: string;
  description: string;
  related_files: string[];
}

export interface SkillScan {
  sources: SkillSource[];
  skills: Skill[];
  warnings: string[];
}

const MAX_WARNINGS = 100;
const MAX_DESCRIPTION_CHARS = 500;
const MAX_RELATIVE_PATH_CHARS = 4096;
const SKIPPED_DIRS = new Set([".git", ".hg", ".svn", "__pycache__"]);
const ENTRY = "SKILL.md";
// C0 and C1 control characters; a name or path holding one is refused.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** The three skill roots in priority order (spec §3.7). */
export function skillSources(projectRoot: string, managedDir: string | undefined): SkillSource[] {
  const xdg = process.env.XDG_CONFIG_HOME;
  const globalRoot =
    xdg && isAbsolute(xdg) ? join(xdg, "agents", "skills") : join(homedir(), ".config", "agents", "skills");
  return [
    { source: "project", path: join(projectRoot, ".agents", "skills") },
    ...(managedDir ? [{ source: "managed" as const, path: managedDir }] : []),
    { source: "global", path: globalRoot },
  ];
}

function validSkillName(name: string): boolean {
  return (
    name.length >= 1 &&
    name.length <= 255 &&
    name.trim() === name &&
    name !== "." &&
    name !== ".." &&
    !name.includes("/") &&
    !CONTROL.test(name)
  );
}

/** Whether `rel` is a canonical relative POSIX path we list and serve. */
export function canonicalRelative(rel: string): boolean {
  if (
    rel.length === 0 ||
    rel.length > MAX_RELATIVE_PATH_CHARS ||
    rel.startsWith("/") ||
    rel.includes("\\") ||
    rel.includes(":") ||
    CONTROL.test(rel)
  )
    return false;
  return rel.split("/").every((part) => part !== "" && part !== "." && part !== "..");
}

/**
 * Reads a regular file without following a final symlink, up to `maxBytes`, checking that the
 * file opened is the one inspected (same device and inode). Returns undefined with a reason.
 */
export function readRegularFile(path: string, maxBytes: number): { text: string; bytes: number } | { error: string } {
  let before;
  try {
    before = lstatSync(path);
  } catch {
    return { error: "cannot be read" };
  }
  if (before.isSymbolicLink()) return { error: "is a symlink" };
  if (!before.isFile()) return { error: "is not a regular file" };
  if (before.size > maxBytes) return { error: `is larger than ${maxBytes} bytes` };
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return { error: "cannot be opened" };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.dev !== before.dev || st.ino !== before.ino) return { error: "changed while it was read" };
    if (st.size > maxBytes) return { error: `is larger than ${maxBytes} bytes` };
    const buf = Buffer.alloc(Math.min(maxBytes + 1, st.size + 1));
    let n = 0;
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    if (n > maxBytes) return { error: `is larger than ${maxBytes} bytes` };
    const text = new TextDecoder("utf-8").decode(buf.subarray(0, n)).replace(/\r\n?/g, "\n");
    return { text, bytes: n };
  } finally {
    closeSync(fd);
  }
}

function clipDescription(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= MAX_DESCRIPTION_CHARS ? flat : `${flat.slice(0, MAX_DESCRIPTION_CHARS - 1).trimEnd()}…`;
}

/** Splits YAML (`---`) or TOML (`+++`) front matter from the body; unparsable front matter is body-less data. */
function frontMatter(text: string): { meta: Record<string, unknown> | undefined; body: string } {
  for (const [fence, parse] of [
    ["---", (s: string) => Bun.YAML.parse(s)],
    ["+++", (s: string) => Bun.TOML.parse(s)],
  ] as const) {
    if (!text.startsWith(`${fence}\n`)) continue;
    const end = text.indexOf(`\n${fence}`, fence.length);
    if (end < 0) return { meta: undefined, body: text };
    const after = text.indexOf("\n", end + 1 + fence.length);
    const body = after < 0 ? "" : text.slice(after + 1);
    try {
      const meta = parse(text.slice(fence.length + 1, end));
      return { meta: meta && typeof meta === "object" ? (meta as Record<string, unknown>) : undefined, body };
    } catch {
      return { meta: undefined, body };
    }
  }
  return { meta: undefined, body: text };
}

/** Description: front matter, else the first prose sentence, else the first heading, else a default. */
export function skillDescription(text: string): string {
  const { meta, body } = frontMatter(text);
  if (typeof meta?.description === "string" && meta.description.trim() !== "") return clipDescription(meta.description);
  let inFence = false;
  let heading: string | undefined;
  const paragraph: string[] = [];
  for (const line of body.split("\n")) {
    const t = line.trim();
    if (/^(```|~~~)/.test(t)) {
      inFence = !inFence;
      if (paragraph.length > 0) break;
      continue;
    }
    if (inFence) continue;
    if (/^#{1,6}(\s|$)/.test(t)) {
      heading ??= t.replace(/^#+\s*/, "").replace(/\s*#+$/, "");
      if (paragraph.length > 0) break;
      continue;
    }
    if (/^([-*_])(\s*\1){2,}$/.test(t)) {
      if (paragraph.length > 0) break;
      continue;
    }
    if (t === "") {
      if (paragraph.length > 0) break;
      continue;
    }
    paragraph.push(t);
  }
  if (paragraph.length > 0) {
    const prose = paragraph.join(" ");
    const sentence = /^.*?[.!?](?=\s|$)/.exec(prose)?.[0] ?? prose;
    return clipDescription(sentence);
  }
  if (heading) return clipDescription(heading);
  return "Agent skill";
}

interface Budget {
  entries: number;
  pathBytes: number;
  warnings: string[];
  omitted: number;
}

function warn(budget: Budget, message: string): void {
  if (budget.warnings.length < MAX_WARNINGS) budget.warnings.push(message);
  else budget.omitted++;
}

function listDir(dir: string, budget: Budget, settings: Settings): string[] | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  const room = settings.max_skill_scan_entries - budget.entries;
  if (names.length > room) {
    warn(
      budget,
      `skill scan stopped after ${settings.max_skill_scan_entries} directory entries (max_skill_scan_entries)`,
    );
    names = names.slice(0, Math.max(0, room));
    budget.entries = settings.max_skill_scan_entries;
  } else budget.entries += names.length;
  return names.sort();
}

/** Regular files under a skill directory, sorted, as canonical relative paths (SKILL.md itself excluded). */
function relatedFiles(skillDir: string, skillName: string, budget: Budget, settings: Settings): string[] {
  const out: string[] = [];
  let stopped = false;
  const walk = (dir: string, prefix: string) => {
    for (const name of listDir(dir, budget, settings) ?? []) {
      if (stopped) return;
      const rel = prefix ? `${prefix}/${name}` : name;
      let st;
      try {
        st = lstatSync(join(dir, name));
      } catch {
        continue;
      }
      if (st.isSymbolicLink()) {
        warn(budget, `skipped symlink ${rel} in Skill ${skillName}`);
        continue;
      }
      if (st.isDirectory()) {
        if (!SKIPPED_DIRS.has(name)) walk(join(dir, name), rel);
        continue;
      }
      if (!st.isFile() || rel === ENTRY) continue;
      if (!canonicalRelative(rel)) {
        warn(budget, `skipped a file of Skill ${skillName} whose path is not a plain relative path`);
        continue;
      }
      if (out.length >= settings.max_skill_related_files) {
        warn(
          budget,
          `Skill ${skillName} lists only its first ${settings.max_skill_related_files} files (max_skill_related_files)`,
        );
        stopped = true;
        return;
      }
      const bytes = Buffer.byteLength(rel);
      if (budget.pathBytes + bytes > settings.max_skill_path_bytes) {
        warn(
          budget,
          `Skill file listing stopped at ${settings.max_skill_path_bytes} bytes of paths (max_skill_path_bytes)`,
        );
        stopped = true;
        return;
      }
      budget.pathBytes += bytes;
      out.push(rel);
    }
  };
  walk(skillDir, "");
  return out.sort();
}

/** Discovers the skills of all sources under the shared budgets (spec §3.7). */
export function scanSkills(sources: SkillSource[], settings: Settings): SkillScan {
  const budget: Budget = { entries: 0, pathBytes: 0, warnings: [], omitted: 0 };
  const seenRoots = new Set<string>();
  const used: SkillSource[] = [];
  const skills = new Map<string, Skill>();
  let full = false;
  for (const src of sources) {
    let real: string;
    try {
      real = realpathSync(src.path);
      if (!lstatSync(real).isDirectory()) continue;
    } catch {
      continue;
    }
    if (seenRoots.has(real)) continue;
    seenRoots.add(real);
    used.push({ source: src.source, path: real });
    for (const name of listDir(real, budget, settings) ?? []) {
      if (full) break;
      const dir = join(real, name);
      let st;
      try {
        st = lstatSync(dir);
      } catch {
        continue;
      }
      if (st.isSymbolicLink()) {
        warn(budget, `skipped symlinked Skill directory ${name} in the ${src.source} source`);
        continue;
      }
      if (!st.isDirectory()) continue;
      if (!validSkillName(name)) {
        warn(budget, `skipped a Skill directory in the ${src.source} source whose name is not valid`);
        continue;
      }
      const entry = join(dir, ENTRY);
      let est;
      try {
        est = lstatSync(entry);
      } catch {
        continue;
      }
      if (skills.has(name)) {
        warn(
          budget,
          `skipped duplicate Skill ${name} from the ${src.source} source: a higher-priority source already provides it`,
        );
        continue;
      }
      if (est.isSymbolicLink()) {
        warn(budget, `skipped Skill ${name} in the ${src.source} source: its ${ENTRY} is a symlink`);
        continue;
      }
      const read = readRegularFile(entry, settings.max_file_read_bytes);
      if ("error" in read) {
        warn(budget, `skipped Skill ${name} in the ${src.source} source: its ${ENTRY} ${read.error}`);
        continue;
      }
      if (skills.size >= settings.max_skills) {
        warn(budget, `skill discovery stopped at ${settings.max_skills} Skills (max_skills)`);
        full = true;
        break;
      }
      skills.set(name, {
        name,
        source: src.source,
        source_path: dir,
        entry_path: entry,
        description: skillDescription(read.text),
        related_files: relatedFiles(dir, name, budget, settings),
      });
    }
  }
  const warnings = [...budget.warnings];
  if (budget.omitted > 0) warnings.push(`${budget.omitted} more warnings omitted`);
  return { sources: used, skills: [...skills.values()], warnings };
}

/** One skill by name, or `unknown_skill`. */
export function findSkill(scan: SkillScan, name: string): Skill {
  const skill = scan.skills.find((s) => s.name === name);
  if (!skill)
    throw new ToolError(
      "unknown_skill",
      `no Skill named ${JSON.stringify(name.slice(0, 255))}; list_agent_skills shows the available ones`,
    );
  return skill;
}
