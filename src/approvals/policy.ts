/**
 * The approval policy: which calls wait for a person before they run. It lives in a JSON file
 * (approval_policy_file, by default <state_dir>/approvals.json) that is read again whenever its
 * identity, size or modification time changes, so an operator edits it without a restart.
 *
 * A missing file means no approvals. A file that exists but cannot be trusted (unreadable, not a
 * regular file, writable by group or others, owned by someone else, malformed) makes every gated
 * call need approval: a broken policy must not silently turn the gate off.
 */
import { fstatSync, openSync, closeSync, readFileSync, statSync, constants } from "node:fs";
import { deniedCommand } from "../exec/policy.ts";
import { log } from "../core/log.ts";

/** Tools the gate knows how to describe (their command or input text); a rule names a subset. */
export const GATED_TOOLS = ["bash", "run_python_code", "send_persistent_shell_input"] as const;

/** One call as the policy sees it. */
export interface ApprovalSubject {
  tool: string;
  /** Agent session id, when the call names one. */
  session: string | null;
  /** Machine the call runs on: "local" or a remote worker's name. */
  machine: string;
  /** The text that runs (a command, a Python script, keys typed into a shell). */
  command: string;
}

export interface ApprovalRule {
  /** Shown to the person and written to the audit log. */
  name: string;
  /** Command words and paths, matched like command_denylist entries; absent = any command. */
  commands?: string[];
  /** Tool names; absent = every gated tool. */
  tools?: string[];
  /** Agent session ids; absent = any session. */
  sessions?: string[];
  /** Machine names ("local" for this host); absent = any machine. */
  machines?: string[];
}

export interface LoadedPolicy {
  rules: ApprovalRule[];
  /** Set when the file exists but could not be used: every gated call then needs approval. */
  broken?: string;
}

const EMPTY: LoadedPolicy = { rules: [] };
const MAX_POLICY_BYTES = 1_048_576;

function stringList(v: unknown, where: string): string[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string" || x.trim() === ""))
    throw new Error(`${where} must be a list of non-empty strings`);
  return v as string[];
}

/** Parses the policy file's JSON text; throws with a readable reason. */
export function parsePolicy(text: string): ApprovalRule[] {
  const doc = JSON.parse(text) as unknown;
  if (doc === null || typeof doc !== "object" || Array.isArray(doc))
    throw new Error("the policy must be a JSON object with a rules list");
  const known = new Set(["rules", "$comment"]);
  for (const k of Object.keys(doc)) if (!known.has(k)) throw new Error(`unknown top-level key ${JSON.stringify(k)}`);
  const rules = (doc as { rules?: unknown }).rules ?? [];
  if (!Array.isArray(rules)) throw new Error("rules must be a list");
  return rules.map((raw, i) => {
    const where = `rules[${i}]`;
    if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new Error(`${where} must be an object`);
    const r = raw as Record<string, unknown>;
    const fields = new Set(["name", "commands", "tools", "sessions", "machines", "$comment"]);
    for (const k of Object.keys(r)) if (!fields.has(k)) throw new Error(`${where}: unknown key ${JSON.stringify(k)}`);
    if (r.name !== undefined && (typeof r.name !== "string" || r.name.length > 200))
      throw new Error(`${where}.name must be a string of at most 200 characters`);
    return {
      name: typeof r.name === "string" && r.name ? r.name : `rule ${i + 1}`,
      commands: stringList(r.commands, `${where}.commands`),
      tools: stringList(r.tools, `${where}.tools`),
      sessions: stringList(r.sessions, `${where}.sessions`),
      machines: stringList(r.machines, `${where}.machines`),
    };
  });
}

/** The first rule a call matches: every criterion a rule names must hold (any entry of a list). */
export function matchRule(rules: readonly ApprovalRule[], s: ApprovalSubject): ApprovalRule | undefined {
  for (const r of rules) {
    if (r.tools ? !r.tools.includes(s.tool) : !(GATED_TOOLS as readonly string[]).includes(s.tool)) continue;
    if (r.sessions && (s.session === null || !r.sessions.includes(s.session))) continue;
    if (r.machines && !r.machines.includes(s.machine)) continue;
    if (r.commands && deniedCommand(s.command, r.commands) === undefined) continue;
    return r;
  }
  return undefined;
}

/** Reads the policy file when it changed since the last look; cheap (one stat) when it did not. */
export class PolicyFile {
  private key = "";
  private current: LoadedPolicy = EMPTY;

  constructor(readonly path: string) {}

  load(): LoadedPolicy {
    let st;
    try {
      st = statSync(this.path, { bigint: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        this.key = "";
        return (this.current = EMPTY);
      }
      return this.fail(`cannot stat the policy file: ${(e as Error).message}`);
    }
    const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    if (key === this.key) return this.current;
    this.key = key;
    this.current = this.read();
    if (this.current.broken)
      log.warn(`approvals: ${this.current.broken}; every gated call needs approval until it is fixed`);
    else log.info(`approvals: policy loaded with ${this.current.rules.length} rule(s)`);
    return this.current;
  }

  private fail(why: string): LoadedPolicy {
    return { rules: [], broken: why };
  }

  private read(): LoadedPolicy {
    let fd: number;
    try {
      fd = openSync(this.path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (e) {
      return this.fail(`cannot open the policy file: ${(e as Error).message}`);
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) return this.fail("the policy file is not a regular file");
      if (typeof process.getuid === "function" && st.uid !== process.getuid())
        return this.fail("the policy file is owned by another user");
      if ((st.mode & 0o022) !== 0) return this.fail("the policy file is writable by group or others");
      if (st.size > MAX_POLICY_BYTES) return this.fail(`the policy file is larger than ${MAX_POLICY_BYTES} bytes`);
      return { rules: parsePolicy(readFileSync(fd, "utf8")) };
    } catch (e) {
      return this.fail(`the policy file is invalid: ${(e as Error).message}`);
    } finally {
      closeSync(fd);
    }
  }
}
