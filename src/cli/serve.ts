import type { ArgsDef, CommandDef } from "citty";
import { mkdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { SettingsError } from "../config/load.ts";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { baseUrlProblem } from "../oauth/urls.ts";
import { settingsArgs, settingsFromArgs } from "./settings-args.ts";

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);

export function isLoopbackHost(host: string): boolean {
  return LOOPBACK_HOSTS.has(host.toLowerCase()) || /^127\.\d+\.\d+\.\d+$/.test(host);
}

const PIN_PLACEHOLDERS = new Set(["", "change-me", "change-me-long-random-pin"]);

/** The admin PIN rule for public OAuth deployments: a non-placeholder of at least 8 characters. */
export function adminPinAcceptable(pin: string | null): boolean {
  if (pin === null) return false;
  const t = pin.trim();
  return t.length >= 8 && !PIN_PLACEHOLDERS.has(t.toLowerCase());
}

/**
 * Whether the state dir can be used: created if missing (0700, ours) and written to. A read-only
 * `$HOME` under the default `~/.local/state/...` is the usual cause; the answer names the setting.
 */
export async function stateDirProblem(dir: string): Promise<string | undefined> {
  const { ensurePrivateDir } = await import("../store/atomic.ts");
  try {
    ensurePrivateDir(dir);
    const probe = join(dir, `.write-probe-${process.pid}`);
    writeFileSync(probe, "", { mode: 0o600, flag: "wx" });
    rmSync(probe, { force: true });
    return undefined;
  } catch (e) {
    const why = e instanceof ToolError ? e.message : ((e as NodeJS.ErrnoException).code ?? "not writable");
    return (
      `state_dir ${dir} cannot be used (${why}); ` +
      "point --state-dir (or LOCAL_SHELL_MCP_STATE_DIR) at a folder this user can write"
    );
  }
}

/** Where embedded helpers go (~/.cache, or $XDG_CACHE_HOME); unwritable means no command can run. */
async function helperCacheProblem(): Promise<string | undefined> {
  const { helperDir } = await import("../native/extract.ts");
  const root = dirname(dirname(helperDir()));
  try {
    mkdirSync(root, { recursive: true, mode: 0o700 });
    const probe = join(root, `.write-probe-${process.pid}`);
    writeFileSync(probe, "", { mode: 0o600, flag: "wx" });
    rmSync(probe, { force: true });
    return undefined;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "error";
    return (
      `the helper cache ${root} is not writable (${code}): commands, shells and jobs will fail; ` +
      "set XDG_CACHE_HOME to a writable folder"
    );
  }
}

/**
 * Whether this server's own executable lies inside the workspace, where the agent may write: it
 * could replace the program that confines it (an archive unpacked and started in place, say).
 */
export function executableInWorkspace(workspaceRoot: string, executable = process.execPath): boolean {
  try {
    const ws = realpathSync(workspaceRoot);
    const exe = realpathSync(executable);
    return exe === ws || exe.startsWith(ws.endsWith("/") ? ws : `${ws}/`);
  } catch {
    return false;
  }
}

/** Start-up rules that refuse unsafe or not-yet-available combinations before anything listens. */
export function startupProblem(s: Settings): string | undefined {
  if (s.mode === "both") return "mode=both is reserved; run separate processes for mcp and http";
  if (s.mode === "stdio") return undefined;
  if (s.base_url !== null) {
    const bad = baseUrlProblem(s.base_url);
    if (bad) return bad;
  }
  for (const [name, value] of [
    ["oauth_issuer", s.oauth_issuer],
    ["oauth_resource", s.oauth_resource],
  ] as const) {
    if (value !== null && !/^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/i.test(value))
      return `${name} must be an absolute http(s) URL without query or fragment`;
  }
  if (s.auth_mode === "oauth") {
    if (s.base_url === null && !isLoopbackHost(s.host)) {
      return (
        `auth_mode=oauth on the non-loopback host ${s.host} needs base_url (the externally visible https ` +
        `origin) so issuer and resource are stable`
      );
    }
    if (s.base_url !== null && !adminPinAcceptable(s.oauth_admin_pin)) {
      return (
        "LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN must be set to a non-placeholder value of at least 8 characters when " +
        "LOCAL_SHELL_MCP_BASE_URL is configured for OAuth"
      );
    }
    return undefined;
  }
  if (!isLoopbackHost(s.host)) {
    return `auth_mode=none is only allowed on a loopback host, not ${s.host}; keep --host 127.0.0.1 or enable OAuth`;
  }
  // A public origin means a front end (the TLS proxy workers dial) forwards other hosts to this
  // loopback listener: without authentication, /mcp would answer every one of them.
  if (s.base_url !== null && !isLoopbackHost(new URL(s.base_url).hostname)) {
    return (
      `auth_mode=none cannot be used with the non-loopback base_url ${new URL(s.base_url).origin}: every host ` +
      "that reaches it (worker hosts too) would get the unauthenticated /mcp; set auth_mode=oauth " +
      "(--auth-mode oauth, LOCAL_SHELL_MCP_AUTH_MODE) or a loopback base_url"
    );
  }
  return undefined;
}

const serveArgs: ArgsDef = settingsArgs();

/** The camelCase spelling citty also accepts for a flag (`max-output-bytes` → `maxOutputBytes`). */
function camel(flag: string): string {
  return flag.replace(/-([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

/**
 * `serve`'s arguments parsed as citty parses them, without citty, whose parser converts the case of
 * every one of the ~190 flag names on each run (~4 ms of a cold start): a string flag takes the
 * next word (or `=value`; none gives ""), a boolean one is true unless `=false`, `--no-x` makes x
 * false, a flag also answers to its camelCase spelling (the kebab one wins when both are given), and
 * `--` ends the flags. Other words are ignored: `serve` takes none, and an unknown flag takes no
 * value.
 */
export function parseServeArgv(argv: readonly string[], defs: ArgsDef = serveArgs): Record<string, unknown> {
  const byCamel = new Map(Object.keys(defs).map((name) => [camel(name), name]));
  const flagOf = (spelling: string) => (Object.hasOwn(defs, spelling) ? spelling : byCamel.get(spelling));
  /** Values by spelling as written, the last one winning. */
  const given = new Map<string, unknown>();
  const negated: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!;
    if (word === "--") break;
    if (!word.startsWith("--")) continue;
    if (word.startsWith("--no-")) {
      negated.push(word.slice(5));
      continue;
    }
    const eq = word.indexOf("=");
    const spelling = eq < 0 ? word.slice(2) : word.slice(2, eq);
    const flag = flagOf(spelling);
    if (flag === undefined) continue;
    if (defs[flag]!.type === "boolean") given.set(spelling, eq < 0 || word.slice(eq + 1) !== "false");
    else given.set(spelling, eq >= 0 ? word.slice(eq + 1) : i + 1 < argv.length ? argv[++i] : "");
  }
  const out: Record<string, unknown> = {};
  for (const flag of Object.keys(defs)) {
    const value = given.has(flag) ? given.get(flag) : given.get(camel(flag));
    if (value !== undefined) out[flag] = value;
  }
  for (const spelling of negated) {
    const flag = flagOf(spelling);
    if (flag !== undefined) out[flag] = false;
  }
  return out;
}

/** `serve` without citty (main.ts): parse, run, and fail as citty's runMain would. */
export async function runServe(argv: readonly string[]): Promise<void> {
  try {
    await serveCommand.run!({ args: parseServeArgv(argv) as never, rawArgs: [...argv], cmd: serveCommand });
  } catch (e) {
    // One line that says what failed; the stack (minified bundle source) only when asked for.
    process.stderr.write(`local-shell-mcp: serve failed: ${e instanceof Error ? e.message : String(e)}\n`);
    if (Number(process.env.LOCAL_SHELL_MCP_LOG_LEVEL ?? 3) >= 4) console.error(e);
    process.exit(1);
  }
}

// A plain command object (not citty's defineCommand) so the fast path does not load citty.
const serveCommand: CommandDef = {
  meta: { name: "serve", description: "Run the MCP server (Streamable HTTP at /mcp, or stdio)" },
  args: serveArgs,
  async run({ args }) {
    let settings: Settings;
    try {
      settings = settingsFromArgs(args);
    } catch (e) {
      if (e instanceof SettingsError) {
        process.stderr.write(`local-shell-mcp: invalid setting: ${e.message}\n`);
        process.exit(2);
      }
      throw e;
    }
    const problem = startupProblem(settings) ?? (await stateDirProblem(settings.state_dir));
    if (problem) {
      process.stderr.write(`local-shell-mcp: refusing to start: ${problem}\n`);
      process.exit(2);
    }
    if (
      settings.mode !== "stdio" &&
      settings.auth_mode === "oauth" &&
      settings.base_url === null &&
      settings.oauth_admin_pin === null
    ) {
      const { ensureLocalAdminPin } = await import("../oauth/local-pin.ts");
      const generated = await ensureLocalAdminPin(settings.state_dir);
      settings.oauth_admin_pin = generated.pin;
      log.info(`no oauth_admin_pin configured: approve clients with the PIN stored in ${generated.path} (owner-only)`);
    }
    if (executableInWorkspace(settings.workspace_root)) {
      log.warn(
        "workspace_root contains this server's executable, which the AI client could then overwrite: " +
          "start the server from your project folder or pass --workspace-root",
      );
    }
    const cacheProblem = await helperCacheProblem();
    if (cacheProblem) log.warn(cacheProblem);
    const { makeNonDumpable } = await import("../native/harden.ts");
    if (!makeNonDumpable()) log.warn("could not mark the server non-dumpable; same-user processes can read its memory");
    const { createApp } = await import("../server/app.ts");
    const { installSignalHandlers, onShutdown } = await import("../server/lifecycle.ts");
    installSignalHandlers();
    const app = createApp(settings);
    // Registered first, so it runs last: records of the final calls reach the disk.
    onShutdown(() => app.services.audit.flush());
    if (settings.mode === "stdio") {
      const { serveStdio } = await import("../server/stdio.ts");
      await serveStdio(app);
      log.info(`serving MCP over stdio (workspace ${settings.workspace_root})`);
      return;
    }
    const { startHttpServer } = await import("../http/server.ts");
    const oauth = settings.auth_mode === "oauth" ? await import("../oauth/index.ts") : undefined;
    const ui = settings.ui_enabled ? await import("../ui/index.ts") : undefined;
    let humanUi: import("../ui/index.ts").HumanUi | undefined;
    const http = startHttpServer(app, {
      rest: settings.mode === "http",
      ...(oauth
        ? {
            prepare: async (origin: string) => {
              const { oauth: server, options } = await oauth.setupOAuth(app, origin);
              humanUi = ui?.humanUi(app, server);
              return { ...options, routes: [...(options.routes ?? []), ...(humanUi?.routes ?? [])] };
            },
          }
        : { routes: (humanUi = ui?.humanUi(app, undefined))?.routes ?? [] }),
    });
    onShutdown(() => http.stop());
    // Registered after the listener, so it runs before it: browser terminals detach first.
    onShutdown(async () => {
      await humanUi?.close();
    });
    try {
      await http.ready;
    } catch (e) {
      const message = e instanceof ToolError ? e.message : "the OAuth state could not be initialised";
      process.stderr.write(`local-shell-mcp: refusing to start: ${message}\n`);
      await http.stop().catch(() => undefined);
      process.exit(2);
    }
    const endpoint = settings.mode === "http" ? "/tools" : "/mcp";
    log.info(
      `listening on ${http.url}${endpoint} (workspace ${settings.workspace_root}, ` +
        `auth ${settings.auth_mode}${settings.mode === "http" ? ", REST debug API" : ""})`,
    );
  },
};
export default serveCommand;
