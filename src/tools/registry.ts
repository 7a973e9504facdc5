import { z } from "zod";
import type { Settings } from "../config/schema.ts";
import { argumentDepthProblem } from "./argument-depth.ts";
import { incidentError, ToolError, toToolError } from "../core/errors.ts";
import { nearest } from "../core/nearest.ts";
import { coerceNumericStrings } from "./coerce.ts";
import type { ToolContext } from "./context.ts";
import { keepRequired, pruneEmpty } from "./compact.ts";
import contractRequired from "./contract-required.json" with { type: "json" };
import { advertisedFullOutputSchema, advertisedInputSchema, advertisedOutputSchema } from "./schema-compact.ts";
import { fillDescription, isAvailable, type Offer, offeredInputSchema, offersOf } from "./define.ts";
import type { AnyTool, ToolAnnotations, ToolManifestEntry } from "./define.ts";

/** Largest text block sent beside structured content. */
const MAX_TEXT_BYTES = 1_000_000;

export interface ToolListing {
  name: string;
  title: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown>;
  /** The whole output schema (structured_output=full advertises it); built on first use. */
  fullOutputSchema?: () => Record<string, unknown>;
  annotations: ToolAnnotations;
  scopes: readonly string[];
  noauthHint: boolean;
}

export type ToolOutcome =
  | { ok: true; structured: Record<string, unknown>; text: string; compact: () => Record<string, unknown> }
  | { ok: false; error: ToolError };

/** Observes calls (the audit log plugs in here). */
export interface CallObserver {
  start(info: {
    callId: string;
    tool: string;
    transport: string;
    input: unknown;
    principal?: { clientId: string; subject: string; scopes: readonly string[] };
  }): void;
  end(info: {
    callId: string;
    tool: string;
    ok: boolean;
    durationMs: number;
    output?: unknown;
    error?: ToolError;
  }): void;
}

/** The advertised (compact) JSON Schema of a zod input or output; see schema-compact.ts. */
function jsonSchema(schema: z.ZodType, io: "input" | "output"): Record<string, unknown> {
  const out = z.toJSONSchema(schema, { io, unrepresentable: "any" }) as Record<string, unknown>;
  return io === "input" ? advertisedInputSchema(out) : advertisedOutputSchema(out);
}

function fullJsonSchema(schema: z.ZodType): Record<string, unknown> {
  return z.toJSONSchema(schema, { io: "output", unrepresentable: "any" }) as Record<string, unknown>;
}

function once<T>(make: () => T): () => T {
  let value: { v: T } | undefined;
  return () => (value ??= { v: make() }).v;
}

/**
 * What the 4.3.0 contract requires of each tool's result, at every depth (its output schemas cut
 * down to their `required` lists by scripts/contract-required.py): the compact form keeps these.
 */
const CONTRACT_REQUIRED = contractRequired as Record<string, Record<string, unknown> | undefined>;

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((i) => {
      const where = i.path.length > 0 ? i.path.join(".") : "arguments";
      return `${where}: ${i.message}`;
    })
    .join("; ");
}

/** Names a model reaches for that mean one of our arguments (`async` is a Python keyword, hence `async_`). */
const ARGUMENT_ALIASES: Record<string, string> = { async: "async_" };

/**
 * Top-level argument names must be ones the tool declares: zod would otherwise drop an unknown
 * name silently (a model's `"async": true` ran a server in the foreground until the timeout).
 * Known aliases are renamed to their argument; anything else is refused with a did-you-mean.
 */
/** The unit an argument's name carries, said beside a did-you-mean (`timeout` → `timeout_s, in seconds`). */
function unitOf(name: string): string {
  if (name.endsWith("_ms")) return ", in milliseconds";
  if (name.endsWith("_s")) return ", in seconds";
  if (name.endsWith("_bytes")) return ", in bytes";
  return "";
}

function checkArgumentNames(def: AnyTool, raw: unknown): unknown {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) return raw;
  // A loose input (a dynamic bridge tool, validated against its upstream's own schema) takes any name.
  const catchall = (def.input._zod.def as { catchall?: { _zod: { def: { type: string } } } }).catchall;
  if (catchall && catchall._zod.def.type !== "never") return raw;
  const known = Object.keys(def.input.shape);
  let args = raw as Record<string, unknown>;
  const unknown: string[] = [];
  for (const name of Object.keys(args)) {
    if (known.includes(name)) continue;
    const alias = ARGUMENT_ALIASES[name];
    if (alias && known.includes(alias)) {
      if (alias in args && args[alias] !== args[name]) {
        throw new ToolError("invalid_arguments", `${name} is an alias of ${alias}; pass only one of them`);
      }
      const { [name]: value, ...rest } = args;
      args = { ...rest, [alias]: value };
      continue;
    }
    unknown.push(name);
  }
  if (unknown.length > 0) {
    const hints = unknown.map((n) => {
      const near = nearest(n, known);
      return near ? `${n} (did you mean ${near}${unitOf(near)}?)` : n;
    });
    throw new ToolError(
      "invalid_arguments",
      `unknown argument${unknown.length > 1 ? "s" : ""} for ${def.name}: ${hints.join(", ")}; ` +
        `accepted: ${known.join(", ")}`,
      {
        unknown,
      },
    );
  }
  return args;
}

function clipText(text: string): string {
  if (Buffer.byteLength(text) <= MAX_TEXT_BYTES) return text;
  return (
    `${Buffer.from(text).subarray(0, MAX_TEXT_BYTES).toString("utf8")}\n[text truncated; the structured ` +
    `result has the fields]`
  );
}

/**
 * The one registry every transport consumes. It owns argument validation, scope checks, the
 * watchdog, output validation and the text rendering; handlers only do their work.
 */
/**
 * Where a registry's tools come from: definitions at hand, or a bundle-time manifest plus a loader
 * that imports the tool modules only when the first call needs them.
 */
export type ToolSource =
  | AnyTool[]
  | {
      manifest: ToolManifestEntry[];
      load: () => Promise<AnyTool[]>;
      loadOne?: (name: string) => Promise<AnyTool | undefined>;
    };

/**
 * Tools that appear and disappear while the server runs (the Agent Bridge's upstream tools and
 * Skills). They go through the same scope check, watchdog and audit path as built-in tools.
 */
export interface DynamicTools {
  /** The current dynamic listings, ready to advertise. */
  listings(): ToolListing[];
  definition(name: string): AnyTool | undefined;
  /** Called whenever the set of dynamic tools changed; returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
}

/**
 * Runs a validated, scope-checked call somewhere other than its handler (a remote session's
 * worker) and returns the result to validate; undefined lets the handler run here.
 */
export type CallRoute = (
  def: AnyTool,
  ctx: ToolContext,
  input: unknown,
  limitMs: number,
) => Promise<unknown> | undefined;

/**
 * Runs after validation and scope checks, before the watchdog starts and before the handler or
 * route: the approval gate (server/approval-gate.ts). It returns undefined when the call needs
 * nothing, or a promise that settles when the call may run and rejects with a ToolError when not.
 */
export type CallGate = (def: AnyTool, ctx: ToolContext, input: unknown) => Promise<void> | undefined;

export class ToolRegistry {
  private readonly listings: ToolListing[];
  private readonly byName = new Map<string, ToolListing>();
  private loaded: Promise<Map<string, AnyTool>> | undefined;
  observer: CallObserver | undefined;
  dynamic: DynamicTools | undefined;
  route: CallRoute | undefined;
  gate: CallGate | undefined;

  private readonly offers: ReadonlySet<Offer>;

  /** `offers` defaults to what the settings alone say (offersOf); the server passes what it found at start. */
  constructor(
    private readonly settings: Settings,
    source: ToolSource,
    offers?: ReadonlySet<Offer>,
  ) {
    this.offers = offers ?? offersOf(settings);
    if (Array.isArray(source)) {
      const defs = source.filter((def) => isAvailable(def.availableWhen, settings, this.offers));
      this.listings = defs.map((def) => ({
        ...this.listingOf(
          def,
          offeredInputSchema(jsonSchema(def.input, "input"), def.argumentsWhen, this.offers),
          jsonSchema(def.output, "output"),
        ),
        fullOutputSchema: once(() => advertisedFullOutputSchema(fullJsonSchema(def.output))),
      }));
      this.loaded = Promise.resolve(new Map(defs.map((d) => [d.name, d])));
      this.load = async () => defs;
    } else {
      this.listings = source.manifest
        .filter((m) => isAvailable(m.availableWhen, settings, this.offers))
        .map(({ availableWhen: _, argumentsWhen, fullOutputSchema: full, ...m }) => ({
          ...m,
          inputSchema: offeredInputSchema(m.inputSchema, argumentsWhen, this.offers),
          description: fillDescription(m.description, settings, this.offers),
          fullOutputSchema: once(() => JSON.parse(full) as Record<string, unknown>),
        }));
      this.load = source.load;
      this.loadOne = source.loadOne;
    }
    for (const l of this.listings) {
      if (this.byName.has(l.name)) throw new Error(`duplicate tool ${l.name}`);
      this.byName.set(l.name, l);
    }
  }

  private readonly load: () => Promise<AnyTool[]>;
  private readonly loadOne: ((name: string) => Promise<AnyTool | undefined>) | undefined;
  private readonly single = new Map<string, Promise<AnyTool | undefined>>();

  /** One built-in definition: from the full set once that is loading, else only its own module. */
  private builtin(name: string): Promise<AnyTool | undefined> {
    if (this.loaded || !this.loadOne) return this.definitions().then((m) => m.get(name));
    let p = this.single.get(name);
    if (!p) this.single.set(name, (p = this.loadOne(name)));
    return p;
  }

  private listingOf(
    def: AnyTool,
    inputSchema: Record<string, unknown>,
    outputSchema: Record<string, unknown>,
  ): ToolListing {
    return {
      name: def.name,
      title: def.title,
      description: fillDescription(def.description, this.settings, this.offers),
      inputSchema,
      outputSchema,
      annotations: def.annotations,
      scopes: def.scopes,
      noauthHint: def.noauthHint ?? false,
    };
  }

  /** The tool definitions, imported on first use and shared by every later call. */
  definitions(): Promise<Map<string, AnyTool>> {
    this.loaded ??= this.load().then((defs) => new Map(defs.map((d) => [d.name, d])));
    return this.loaded;
  }

  has(name: string): boolean {
    return this.byName.has(name) || this.dynamic?.definition(name) !== undefined;
  }

  list(): ToolListing[] {
    // A client lists tools right before calling them: start importing the modules now, after this
    // answer has gone out, so the first call does not wait for them.
    if (!this.loaded) setTimeout(() => void this.definitions().catch(() => undefined), 0);
    return this.dynamic
      ? [...this.listings, ...this.dynamic.listings().filter((l) => !this.byName.has(l.name))]
      : this.listings;
  }

  /** Whether `name` is one of ours (not a tool the Agent Bridge forwards from an upstream server). */
  isBuiltin(name: string): boolean {
    return this.byName.has(name);
  }

  listing(name: string): ToolListing | undefined {
    return this.byName.get(name) ?? this.dynamic?.listings().find((l) => l.name === name);
  }

  timeoutMs(def: AnyTool): number {
    return Math.round((def.timeoutS ? def.timeoutS(this.settings) : this.settings.tool_timeout_s) * 1000);
  }

  /** Maximum serialized size of one call's arguments. */
  private argumentLimit(): number {
    return this.settings.max_file_write_bytes + 1_048_576;
  }

  async call(ctx: ToolContext, name: string, args: unknown): Promise<ToolOutcome> {
    const def = this.byName.has(name) ? await this.builtin(name) : this.dynamic?.definition(name);
    if (!def) return { ok: false, error: new ToolError("unknown_tool", `Unknown tool: ${name}`) };
    const started = performance.now();
    // Before anything recursive (audit redaction, size check, zod) walks the arguments.
    const tooDeep = argumentDepthProblem(args);
    this.observer?.start({
      callId: ctx.callId,
      tool: name,
      transport: ctx.transport,
      input: tooDeep ? { omitted: tooDeep } : args,
      principal: ctx.principal,
    });
    const outcome: ToolOutcome = tooDeep
      ? { ok: false, error: new ToolError("invalid_arguments", `invalid arguments for ${def.name}: ${tooDeep}`) }
      : await this.invoke(def, ctx, args);
    this.observer?.end({
      callId: ctx.callId,
      tool: name,
      ok: outcome.ok,
      durationMs: Math.round(performance.now() - started),
      ...(outcome.ok ? { output: outcome.structured } : { error: outcome.error }),
    });
    return outcome;
  }

  private async invoke(def: AnyTool, ctx: ToolContext, args: unknown): Promise<ToolOutcome> {
    try {
      const missing = def.scopes.find((s) => ctx.principal && !ctx.principal.scopes.includes(s));
      if (missing)
        throw new ToolError("insufficient_scope", `Missing required OAuth scope: ${missing}`, { scope: missing });
      const raw = args ?? {};
      if (JSON.stringify(raw).length > this.argumentLimit()) {
        throw new ToolError("arguments_too_large", `arguments exceed ${this.argumentLimit()} bytes`);
      }
      const named = checkArgumentNames(def, raw);
      let parsed = def.input.safeParse(named);
      if (!parsed.success) {
        const coerced = coerceNumericStrings(def.input, named);
        if (coerced !== named) parsed = def.input.safeParse(coerced);
      }
      if (!parsed.success)
        throw new ToolError("invalid_arguments", `invalid arguments for ${def.name}: ${describeIssues(parsed.error)}`);
      // Waiting for a person does not eat into the tool's own time.
      const gated = this.gate?.(def, ctx, parsed.data);
      if (gated) await gated;
      const result = await this.withWatchdog(def, ctx, parsed.data);
      const structured = def.output.parse(result) as Record<string, unknown>;
      const text = def.text ? def.text(structured as never) : JSON.stringify(structured);
      const compact = () => {
        const shaped = def.compact ? def.compact(structured as never) : pruneEmpty(structured);
        return keepRequired(shaped, structured, CONTRACT_REQUIRED[def.name]) as Record<string, unknown>;
      };
      return { ok: true, structured, text: clipText(text), compact };
    } catch (e) {
      if (e instanceof z.ZodError)
        return {
          ok: false,
          error: incidentError(
            e,
            `tool ${def.name}: result outside its schema`,
            `${def.name} produced a result outside its schema`,
          ),
        };
      return { ok: false, error: toToolError(e, `tool ${def.name}`) };
    }
  }

  private async withWatchdog(def: AnyTool, ctx: ToolContext, input: unknown): Promise<unknown> {
    const limitMs = this.timeoutMs(def);
    const watchdog = new AbortController();
    const onOuterAbort = () => watchdog.abort();
    ctx.signal.addEventListener("abort", onOuterAbort, { once: true });
    let timer: Timer | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        watchdog.abort();
        reject(new ToolError("tool_timeout", `${def.name} exceeded ${limitMs / 1000} second tool timeout`));
      }, limitMs);
    });
    try {
      const inner = { ...ctx, signal: watchdog.signal };
      return await Promise.race([this.route?.(def, inner, input, limitMs) ?? def.run(inner, input as never), expired]);
    } finally {
      clearTimeout(timer);
      ctx.signal.removeEventListener("abort", onOuterAbort);
    }
  }
}
