import { ToolError } from "../core/errors.ts";

/** Linux refuses any single argv or environment string longer than this (MAX_ARG_STRLEN) with E2BIG. */
export const MAX_ARG_STRING_BYTES = 131_072;
/**
 * The caller's environment overrides, summed. argv and the environment together must fit in a
 * quarter of the stack limit (2 MB with the usual 8 MB), which the inherited environment shares.
 */
export const MAX_ENV_OVERRIDE_BYTES = 1_048_576;

/**
 * Why these overrides cannot reach exec, or undefined when they fit. Checked as an argument error
 * so the model learns the limit instead of seeing the runner fail to start.
 */
export function envSizeProblem(env: Record<string, string>): string | undefined {
  let total = 0;
  for (const [k, v] of Object.entries(env)) {
    // Each entry reaches the kernel as "NAME=value" plus a terminating NUL.
    const bytes = Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
    if (bytes > MAX_ARG_STRING_BYTES) {
      return (
        `variable ${k} is ${bytes} bytes; one variable may hold at most ${MAX_ARG_STRING_BYTES} bytes (a ` +
        `kernel limit). Pass large data in a file instead`
      );
    }
    total += bytes;
  }
  if (total > MAX_ENV_OVERRIDE_BYTES) {
    return (
      `the variables add up to ${total} bytes; env may hold at most ${MAX_ENV_OVERRIDE_BYTES} bytes in all. ` +
      `Pass large data in a file instead`
    );
  }
  return undefined;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Server-internal variables a command must not inherit. */
const HIDDEN = [/^LOCAL_SHELL_MCP_/, /^DOCKER_/, /^PYTHONPATH$/, /^CLOUDFLARE_TUNNEL_TOKEN$/, /^BUN_PTY_LIB$/];

export function validateEnv(env: Record<string, string> | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env ?? {})) {
    if (!ENV_NAME.test(k))
      throw new ToolError("env_name_invalid", `invalid environment variable name: '${k}'`, { name: k });
    if (v.includes("\0"))
      throw new ToolError("env_value_invalid", `environment variable ${k} contains a NUL byte`, { name: k });
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
export function childEnv(
  overrides: Record<string, string>,
  base?: Record<string, string | undefined>,
): Record<string, string> {
  const kept = base ? filtered(base) : (inherited ??= filtered(process.env));
  return { ...kept, ...overrides };
}
