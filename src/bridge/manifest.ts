import { lstatSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";

/** Server and secret names: what the credential store accepts as keys. */
export const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** Largest manifest we parse; a bigger file is an error, not a truncated read. */
export const MAX_MANIFEST_BYTES = 1_048_576;

const secretRef = z
  .object({
    secret: z
      .string()
      .regex(
        NAME_PATTERN,
        "must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit",
      ),
  })
  .strict();
const valueOrSecret = z.union([z.string(), secretRef]);
export type ValueOrSecret = z.infer<typeof valueOrSecret>;

const authSchema = z.object({
  mode: z.enum(["none", "secret", "oauth"]).default("none"),
  scopes: z.array(z.string()).default([]),
});

const serverSchema = z.object({
  type: z.enum(["stdio", "http", "sse"]),
  enabled: z.boolean().default(true),
  command: z.string().optional(),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), valueOrSecret).default({}),
  url: z.string().optional(),
  headers: z.record(z.string(), valueOrSecret).default({}),
  auth: authSchema.default({ mode: "none", scopes: [] }),
  // Our extensions (the Python server ignores unknown keys):
  maxConcurrentCalls: z.number().int().min(1).max(64).default(4),
  idleTimeoutS: z
    .number()
    .int()
    .min(0)
    .max(7 * 86_400)
    .default(600),
});

const manifestSchema = z.object({
  version: z.literal(1),
  mcpServers: z.record(z.string(), serverSchema).default({}),
  skills: z
    .object({ enabled: z.boolean().default(true), directory: z.string().default("skills") })
    .default({ enabled: true, directory: "skills" }),
  dynamicTools: z
    .object({ mcp: z.boolean().default(true), skills: z.boolean().default(true) })
    .default({ mcp: true, skills: true }),
});

export type ServerConfig = z.output<typeof serverSchema> & { name: string };
export interface Manifest {
  servers: Map<string, ServerConfig>;
  skills: { enabled: boolean; directory: string };
  dynamicTools: { mcp: boolean; skills: boolean };
}

export type ManifestLoad =
  | { status: "loaded" | "missing_config"; manifest: Manifest; errors: [] }
  | { status: "invalid_config"; manifest: undefined; errors: string[] };

export const DEFAULT_MANIFEST: Manifest = {
  servers: new Map(),
  skills: { enabled: true, directory: "skills" },
  dynamicTools: { mcp: true, skills: true },
};

export function agentConfigDir(stateDir: string): string {
  return join(stateDir, "agent_config");
}

export function manifestPath(stateDir: string): string {
  return join(agentConfigDir(stateDir), "config.json");
}

function isSecretRef(v: ValueOrSecret): v is { secret: string } {
  return typeof v === "object";
}

/** The secret names a server refers to in env and headers, in order, without duplicates. */
export function secretRefs(server: ServerConfig): string[] {
  const names = [...Object.values(server.env), ...Object.values(server.headers)]
    .filter(isSecretRef)
    .map((v) => v.secret);
  return [...new Set(names)];
}

const WHITESPACE = /\s/;

/** The cross-field rules of spec §3.2; each issue names a field path, never the value. */
function checkServer(name: string, s: z.output<typeof serverSchema>, issues: string[]): void {
  const at = `mcpServers.${NAME_PATTERN.test(name) ? name : "?"}`;
  if (!NAME_PATTERN.test(name))
    issues.push(
      "mcpServers: a server name must be 1-128 characters of letters, digits, '.', '_' or '-', starting " +
        "with a letter or digit",
    );
  if (s.type === "stdio") {
    if (s.command === undefined || s.command.trim() === "")
      issues.push(`${at}.command: a stdio server needs a non-blank command`);
  } else {
    if (s.url === undefined || s.url.trim() === "") issues.push(`${at}.url: an ${s.type} server needs a non-blank url`);
    else if (!URL.canParse(s.url.trim()) || !/^https?:$/.test(new URL(s.url.trim()).protocol))
      issues.push(`${at}.url: must be an absolute http or https URL`);
  }
  if (s.auth.mode === "oauth" && s.type === "stdio")
    issues.push(`${at}.auth.mode: oauth is only valid for http and sse servers`);
  const refs = [
    ...Object.entries(s.env).map(([k, v]) => [`env.${k}`, v] as const),
    ...Object.entries(s.headers).map(([k, v]) => [`headers.${k}`, v] as const),
  ].filter(([, v]) => isSecretRef(v));
  if (s.auth.mode === "secret" && refs.length === 0)
    issues.push(`${at}.auth.mode: secret mode needs at least one {"secret": NAME} reference in env or headers`);
  if (s.auth.mode !== "secret")
    for (const [where] of refs) issues.push(`${at}.${where}: secret references require auth.mode "secret"`);
  s.auth.scopes.forEach((scope, i) => {
    const t = scope.trim();
    if (t === "" || WHITESPACE.test(t))
      issues.push(`${at}.auth.scopes.${i}: a scope must be one non-empty token without whitespace`);
  });
  s.auth.scopes = [...new Set(s.auth.scopes.map((x) => x.trim()))];
  for (const k of Object.keys(s.headers))
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k)) issues.push(`${at}.headers: a header name is not a valid HTTP token`);
  for (const k of Object.keys(s.env))
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) issues.push(`${at}.env: an environment variable name is invalid`);
}

function checkSkillsDir(dir: string, issues: string[]): void {
  const parts = dir.split("/");
  if (
    dir.trim() === "" ||
    dir.startsWith("/") ||
    dir.includes("\\") ||
    dir.includes("\0") ||
    parts.some((p) => p === ".." || p === "")
  ) {
    issues.push("skills.directory: must be a relative path inside agent_config");
  }
}

/** Zod issues as `path: message`; zod 4 messages describe the expectation, not the input. */
function zodIssues(error: z.ZodError): string[] {
  return error.issues
    .slice(0, 50)
    .map((i) => `${i.path.length > 0 ? i.path.map(String).join(".") : "(root)"}: ${i.message}`);
}

/** Validates a parsed manifest document (exported for unit tests of the rules). */
export function parseManifest(doc: unknown): ManifestLoad {
  const parsed = manifestSchema.safeParse(doc);
  if (!parsed.success) return { status: "invalid_config", manifest: undefined, errors: zodIssues(parsed.error) };
  const issues: string[] = [];
  const servers = new Map<string, ServerConfig>();
  for (const [name, s] of Object.entries(parsed.data.mcpServers)) {
    checkServer(name, s, issues);
    servers.set(name, { ...s, name, command: s.command?.trim(), url: s.url?.trim() });
  }
  checkSkillsDir(parsed.data.skills.directory, issues);
  if (issues.length > 0) return { status: "invalid_config", manifest: undefined, errors: issues };
  return {
    status: "loaded",
    manifest: { servers, skills: parsed.data.skills, dynamicTools: parsed.data.dynamicTools },
    errors: [],
  };
}

/**
 * Reads `<state_dir>/agent_config/config.json`, re-reading only when the file changed (size, mtime,
 * inode), so every tool call sees the current manifest without paying a parse.
 */
export class ManifestSource {
  private cache: { key: string; load: ManifestLoad } | undefined;
  readonly path: string;

  constructor(stateDir: string) {
    this.path = manifestPath(stateDir);
  }

  current(): ManifestLoad {
    let key: string;
    try {
      const st = lstatSync(this.path);
      if (!st.isFile()) return this.remember("not-a-file", () => invalid("config.json: is not a regular file"));
      if (st.size > MAX_MANIFEST_BYTES)
        return this.remember(`big:${st.size}`, () => invalid(`config.json: larger than ${MAX_MANIFEST_BYTES} bytes`));
      key = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT")
        return { status: "missing_config", manifest: DEFAULT_MANIFEST, errors: [] };
      return invalid("config.json: cannot be read");
    }
    return this.remember(key, () => {
      let doc: unknown;
      try {
        doc = JSON.parse(readFileSync(this.path, "utf8"));
      } catch {
        // The parser's message can quote the file's text, so it is not passed on.
        return invalid("config.json: is not valid JSON");
      }
      return parseManifest(doc);
    });
  }

  private remember(key: string, compute: () => ManifestLoad): ManifestLoad {
    if (this.cache?.key === key) return this.cache.load;
    const load = compute();
    this.cache = { key, load };
    return load;
  }
}

function invalid(message: string): ManifestLoad {
  return { status: "invalid_config", manifest: undefined, errors: [message] };
}
