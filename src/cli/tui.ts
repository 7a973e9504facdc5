import { defineCommand } from "citty";
import { SettingsError } from "../config/load.ts";
import { settingsArgs, settingsFromArgs } from "./settings-args.ts";

/**
 * `local-shell-mcp tui [--api-base URL] [settings flags]`: the terminal UI for a running `serve`
 * on this machine, authenticated with the loopback token from the state dir (or inherited in
 * LOCAL_SHELL_MCP_UI_LOCAL_TOKEN). Everything heavy (OpenTUI, its native library) loads here only.
 */
export default defineCommand({
  meta: { name: "tui", description: "Terminal UI for a local server: sessions, shells (attach), jobs, audit" },
  args: {
    "api-base": {
      type: "string",
      description: "Human UI API of the server (default http://127.0.0.1:<port>/api/ui); loopback only",
    },
    ...settingsArgs(),
  },
  async run({ args }) {
    const fail = (message: string, code = 2): never => {
      process.stderr.write(`local-shell-mcp tui: ${message}\n`);
      process.exit(code);
    };
    let settings: ReturnType<typeof settingsFromArgs>;
    try {
      settings = settingsFromArgs(args);
    } catch (e) {
      if (e instanceof SettingsError) return fail(`invalid setting: ${e.message}`);
      throw e;
    }
    const { apiBaseFrom, runExternalTui } = await import("../tui/launch.ts");
    const base = apiBaseFrom(typeof args["api-base"] === "string" ? args["api-base"] : undefined, settings.port);
    if (!base.ok) return fail(base.message);
    const { LOCAL_TOKEN_ENV, readLocalToken } = await import("../ui/local-token.ts");
    let token = process.env[LOCAL_TOKEN_ENV] ?? "";
    if (!token) {
      try {
        token = readLocalToken(settings.state_dir);
      } catch (e) {
        return fail((e as Error).message);
      }
    }
    try {
      if (settings.ui_tui_command) process.exit(await runExternalTui(settings.ui_tui_command, base.base, token));
      const { runTui } = await import("../tui/app.ts");
      process.exit(await runTui({ apiBase: base.base, token }));
    } catch (e) {
      fail((e as Error).message, 1);
    }
  },
});
