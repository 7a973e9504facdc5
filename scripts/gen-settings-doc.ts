/**
 * Writes docs/settings.md from the settings schema, so the table can never drift from the code.
 * Usage: bun scripts/gen-settings-doc.ts [--check]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { settingDefault, settingInfos } from "../src/config/load.ts";
import { SettingsSchema } from "../src/config/schema.ts";

function range(name: string): string {
  const field = SettingsSchema.shape[name as keyof typeof SettingsSchema.shape];
  const j = z.toJSONSchema(field, { io: "input", unrepresentable: "any" }) as { minimum?: number; maximum?: number };
  if (j.minimum === undefined && j.maximum === undefined) return "";
  return `${j.minimum ?? ""} … ${j.maximum ?? ""}`;
}

function fmt(v: unknown): string {
  if (v === null) return "unset";
  if (Array.isArray(v)) return v.length ? `\`${v.join(",")}\`` : "empty";
  return `\`${String(v)}\``;
}

export function renderSettingsDoc(): string {
  const lines = [
    "# Settings",
    "",
    "Generated from `src/config/schema.ts` by `bun scripts/gen-settings-doc.ts`; do not edit by hand.",
    "",
    "Precedence: defaults < YAML file (`--config` or `LOCAL_SHELL_MCP_CONFIG`) < environment < flags.",
    "Booleans are `true`/`false`; lists are comma-separated in env and flags, YAML lists in the file;",
    "nullable settings accept `--unset-<flag>` and an empty env value. `workspace_root` defaults to the",
    "directory `serve` starts in, `state_dir` to `$XDG_STATE_HOME/local-shell-mcp/<workspace>-<hash>`.",
    "",
  ];
  let section = "";
  for (const i of settingInfos()) {
    if (i.section !== section) {
      if (section) lines.push("");
      section = i.section;
      lines.push(
        `## ${section}`,
        "",
        "| setting | env / flag | type | default | range | meaning |",
        "|---|---|---|---|---|---|",
      );
    }
    const type = i.kind === "enum" ? i.choices.join(" \\| ") : i.kind;
    lines.push(
      `| \`${i.name}\` | \`${i.env}\`<br>\`--${i.flag}\` | ${type}${i.nullable ? " (nullable)" : ""} ` +
        `| ${fmt(settingDefault(i.name))} | ${range(i.name)} | ${i.help} |`,
    );
  }
  lines.push("");
  return `${lines.join("\n")}\n`;
}

if (import.meta.main) {
  const path = join(import.meta.dir, "..", "docs", "settings.md");
  const text = renderSettingsDoc();
  if (process.argv.includes("--check")) {
    if (readFileSync(path, "utf8") !== text) {
      console.error("docs/settings.md is stale: run bun scripts/gen-settings-doc.ts");
      process.exit(1);
    }
  } else writeFileSync(path, text);
}
