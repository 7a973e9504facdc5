import { ToolError } from "../core/errors.ts";

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Server-internal variables a command must not inherit. */
const HIDDEN = [/^LOCAL_SHELL_MCP_/, /^DOCKER_/, /^PYTHONPATH$/, /^CLOUDFLARE_TUNNEL_TOKEN$/, /^BUN_PTY_LIB$/];

export function validateEnv(env: Record<string, string> | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env ?? {})) {
    if (!ENV_NAME.test(k)) throw new ToolError("invalid_env_name", `invalid environment variable name: '${k}'`, { name: k });
    if (v.includes("\0")) throw new ToolError("invalid_env_value", `environment variable ${k} contains a NUL byte`, { name: k });
    out[k] = v;
  }
  return out;
}

function filtered(base: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) {
    if (v === undefined || HIDDEN.some((re) => re.test(k))) continue;
    out[k] = v;
  }
  return out;
}

let inherited: Record<string, string> | undefined;

/**
 * The child environment: ours minus internal variables, plus the caller's overrides. Our own
 * environment is filtered once per process (it does not change while we run).
 */
export function childEnv(overrides: Record<string, string>, base?: Record<string, string | undefined>): Record<string, string> {
  const kept = base ? filtered(base) : (inherited ??= filtered(process.env));
  return { ...kept, ...overrides };
}
