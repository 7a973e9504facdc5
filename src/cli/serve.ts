import { defineCommand } from "citty";
import { SettingsError } from "../config/load.ts";
import type { Settings } from "../config/schema.ts";
import { log } from "../core/log.ts";
import { settingsArgs, settingsFromArgs } from "./settings-args.ts";

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);

export function isLoopbackHost(host: string): boolean {
  return LOOPBACK_HOSTS.has(host.toLowerCase()) || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Start-up rules that refuse unsafe or not-yet-available combinations before anything listens. */
export function startupProblem(s: Settings): string | undefined {
  if (s.mode === "both") return "mode=both is reserved; run separate processes for mcp and http";
  if (s.mode === "http") return "mode=http (the REST debug API) is not available in this build yet; use --mode mcp or --mode stdio";
  if (s.mode === "stdio") return undefined;
  if (s.auth_mode === "oauth") {
    return "auth_mode=oauth needs the built-in OAuth authorization server, which this build does not include yet; for local testing use --auth-mode none on a loopback host";
  }
  if (!isLoopbackHost(s.host)) {
    return `auth_mode=none is only allowed on a loopback host, not ${s.host}; keep --host 127.0.0.1 or enable OAuth`;
  }
  return undefined;
}

export default defineCommand({
  meta: { name: "serve", description: "Run the MCP server (Streamable HTTP at /mcp, or stdio)" },
  args: settingsArgs(),
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
    const problem = startupProblem(settings);
    if (problem) {
      process.stderr.write(`local-shell-mcp: refusing to start: ${problem}\n`);
      process.exit(2);
    }
    const { createApp } = await import("../server/app.ts");
    const { installSignalHandlers, onShutdown } = await import("../server/lifecycle.ts");
    installSignalHandlers();
    const app = createApp(settings);
    if (settings.mode === "stdio") {
      const { serveStdio } = await import("../server/stdio.ts");
      await serveStdio(app);
      log.info(`serving MCP over stdio (workspace ${settings.workspace_root})`);
      return;
    }
    const { startHttpServer } = await import("../http/server.ts");
    const http = startHttpServer(app);
    onShutdown(() => http.stop());
    log.info(`listening on ${http.url}/mcp (workspace ${settings.workspace_root}, auth ${settings.auth_mode})`);
  },
});
