import type { ArgsDef } from "citty";
import { loadSettings, SettingsError, settingInfos } from "../config/load.ts";
import type { SettingName, Settings } from "../config/schema.ts";

/** citty argument definitions: one --flag per setting, --unset-<flag> for nullable ones, and --config. */
export function settingsArgs(): ArgsDef {
  const args: ArgsDef = {
    config: { type: "string", description: "YAML settings file (overrides LOCAL_SHELL_MCP_CONFIG)" },
  };
  for (const info of settingInfos()) {
    const values =
      info.kind === "boolean"
        ? "true|false"
        : info.kind === "enum"
          ? info.choices.join("|")
          : info.kind === "list"
            ? "a,b,c"
            : info.kind;
    args[info.flag] = { type: "string", valueHint: values, description: `${info.help} Env ${info.env}.` };
    if (info.nullable)
      args[`unset-${info.flag}`] = { type: "boolean", description: `Unset ${info.name} (overrides env and file).` };
  }
  return args;
}

/** Loads settings from the parsed CLI args plus env and file; a bad value throws SettingsError. */
export function settingsFromArgs(args: Record<string, unknown>): Settings {
  const flags: Partial<Record<SettingName, string | null>> = {};
  for (const info of settingInfos()) {
    const unset = info.nullable && args[`unset-${info.flag}`] === true;
    const value = args[info.flag];
    if (unset && value !== undefined)
      throw new SettingsError(`--${info.flag} and --unset-${info.flag} cannot be combined`);
    if (unset) flags[info.name] = null;
    else if (typeof value === "string") flags[info.name] = value;
    else if (value !== undefined) throw new SettingsError(`--${info.flag} needs a value`);
  }
  return loadSettings({ flags, configPath: typeof args.config === "string" ? args.config : undefined });
}
