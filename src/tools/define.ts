import { z } from "zod";
import type { Settings } from "../config/schema.ts";
import type { Scope, ToolContext } from "./context.ts";

export interface ToolAnnotations {
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: boolean;
}

export interface ToolDefinition<I extends z.ZodObject = z.ZodObject, O extends z.ZodObject = z.ZodObject> {
  name: string;
  title: string;
  /** Model-facing text; `{{setting_name}}` placeholders are filled with live limits. */
  description: string;
  scopes: readonly Scope[];
  annotations: ToolAnnotations;
  input: I;
  output: O;
  /** Watchdog for one call; defaults to tool_timeout_s. */
  timeoutS?: (settings: Settings) => number;
  /** One compact text block for text-only clients; defaults to compact JSON. */
  text?: (output: z.output<O>) => string;
  /**
   * The `compact` structured form (structured_output=compact): the contract's required fields with
   * no repetition and nothing that restates the text. Defaults to `pruneEmpty` of the full result.
   */
  compact?: (output: z.output<O>) => Record<string, unknown>;
  /**
   * Advertise `noauth` ahead of oauth2 in the security schemes (the ChatGPT connector pair). Only a
   * hint for clients: the scopes are still enforced whenever the caller is authenticated.
   */
  noauthHint?: boolean;
  /** When the tool is offered (default: always); declarative, so the bundle-time manifest keeps it. */
  availableWhen?: Availability;
  /** Arguments advertised only when the server offers a capability (still accepted without it). */
  argumentsWhen?: Partial<Record<Offer, readonly string[]>>;
  run: (ctx: ToolContext, input: z.output<I>) => Promise<z.input<O>>;
}

/** Boolean settings a tool can depend on. */
type BooleanSetting = { [K in keyof Settings]: Settings[K] extends boolean ? K : never }[keyof Settings];

/**
 * What this server offers beyond its settings: `remote_workers` (remote_enabled in an HTTP mode, the
 * only modes a worker can dial) and `agent_bridge` (under stdio only when something is configured
 * for it when the server starts: its config folder or a Skills folder).
 */
export type Offer = "remote_workers" | "agent_bridge";

export function offersOf(settings: Settings, bridgeConfigured = true): ReadonlySet<Offer> {
  const offers = new Set<Offer>();
  if (settings.remote_enabled && (settings.mode === "mcp" || settings.mode === "http")) offers.add("remote_workers");
  // Listed even when agent_bridge_enabled is off: the tools then say so (agent_bridge_disabled).
  if (settings.mode !== "stdio" || bridgeConfigured) offers.add("agent_bridge");
  return offers;
}

/**
 * A tool is offered only when every named boolean setting is on, the server runs in one of the
 * modes and it offers each named capability.
 */
export interface Availability {
  settings?: readonly BooleanSetting[];
  modes?: readonly Settings["mode"][];
  offers?: readonly Offer[];
}

export function isAvailable(
  when: Availability | undefined,
  settings: Settings,
  offers: ReadonlySet<Offer> = offersOf(settings),
): boolean {
  if (!when) return true;
  if (when.modes && !when.modes.includes(settings.mode)) return false;
  if (when.offers && !when.offers.every((o) => offers.has(o))) return false;
  return (when.settings ?? []).every((name) => settings[name] === true);
}

/** What tools/list needs of a tool, without its zod schemas or handler (see schemas.macro.ts). */
export interface ToolManifestEntry {
  name: string;
  title: string;
  /** Description text, unwrapped at bundle time; placeholders are filled at run time. */
  description: string;
  scopes: string[];
  annotations: ToolAnnotations;
  noauthHint: boolean;
  availableWhen?: Availability;
  argumentsWhen?: Partial<Record<Offer, readonly string[]>>;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown>;
  /** The whole output schema as JSON text, parsed only when a connection in `full` mode lists tools. */
  fullOutputSchema: string;
}

/** Declares a tool; the identity function exists for type inference of input and output. */
export function defineTool<I extends z.ZodObject, O extends z.ZodObject>(
  def: ToolDefinition<I, O>,
): ToolDefinition<I, O> {
  return def;
}

/** Annotation presets matching the compatibility matrix. */
export const READ_ONLY: ToolAnnotations = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
};

/**
 * A description as the model gets it: the line breaks that only wrap the source at 100 columns are
 * joined with a space (they carry nothing and cost two bytes of JSON each); paragraph breaks and
 * list items (`- `) stay on their own lines.
 */
export function unwrapDescription(text: string): string {
  const out: string[] = [];
  // What the previous line was: nothing to join to, a paragraph, or a list item (whose own
  // continuation lines are indented; an unindented line after it starts a new line).
  let previous: "none" | "paragraph" | "item" = "none";
  for (const line of text.trim().split("\n")) {
    const item = line.startsWith("- ");
    if (line.trim() === "") {
      out.push("");
      previous = "none";
    } else if (!item && (previous === "paragraph" || (previous === "item" && /^\s/.test(line)))) {
      out[out.length - 1] += ` ${line.trim()}`;
    } else {
      out.push(line.trimEnd());
      previous = item ? "item" : "paragraph";
    }
  }
  return out.join("\n");
}

/**
 * A description with its live limits filled in. A part written `{{#offer}}…{{/offer}}` is kept only
 * when the server offers that capability, so no tool describes what this server cannot do.
 */
const OFFERED_PART = /\{\{#(\w+)\}\}([\s\S]*?)\{\{\/\1\}\}/g;

export function fillDescription(
  text: string,
  settings: Settings,
  offers: ReadonlySet<Offer> = offersOf(settings),
): string {
  const offered = text.replace(OFFERED_PART, (_, name: string, part: string) =>
    offers.has(name as Offer) ? part : "",
  );
  return offered.trim().replace(/\{\{(\w+)\}\}/g, (m, name: string) => {
    const v = (settings as Record<string, unknown>)[name];
    return v === undefined ? m : String(v);
  });
}

/** An input schema without the arguments of capabilities this server does not offer. */
export function offeredInputSchema(
  schema: Record<string, unknown>,
  when: Partial<Record<Offer, readonly string[]>> | undefined,
  offers: ReadonlySet<Offer>,
): Record<string, unknown> {
  const hidden = Object.entries(when ?? {}).flatMap(([offer, names]) =>
    offers.has(offer as Offer) ? [] : [...(names ?? [])],
  );
  if (hidden.length === 0) return schema;
  const all = Object.entries((schema.properties ?? {}) as Record<string, unknown>);
  const properties = Object.fromEntries(all.filter(([k]) => !hidden.includes(k)));
  return { ...schema, properties };
}
