/**
 * The error codes src/ can produce, found in the code itself, and the check that
 * docs/error-codes.md lists exactly those.
 * Usage: bun scripts/error-codes.ts [--check | --sites | --write]
 *   (no flag)  one line per code: the code and the folders that produce it
 *   --sites    every place a code is made, and every place one is passed through
 *   --check    exit 1 with the differences when the catalogue and the code disagree
 *   --write    rewrites the catalogue's tables: keeps each meaning, fills the "from" column,
 *              adds a row for a new code (its meaning left to write) and drops unused rows
 * test/core/error-code-catalogue.test.ts runs the check.
 *
 * How a code is found. The TypeScript compiler parses src/ (the browser app in src/ui/web is a
 * client of the server and makes no code the server sends) and the checker follows values:
 * - sinks, the places a code leaves the code: the first argument of `new ToolError(…)`, and the
 *   `code` of an object literal that also has a `message` (wire errors: worker channel results,
 *   terminal socket messages, the ssh server's envelope) and the `error` of one that also has a
 *   `message` or an `error_description` (the HTTP error envelope, OAuth error bodies);
 * - a sink's value is resolved to string literals: a literal; each branch of `?:`, `??`, `||`;
 *   any expression whose type is a union of string literals (a typed code union); a const's
 *   initialiser; a parameter, by resolving the argument at every call site of its function (and
 *   its default); an element of a const object or array, by all its values;
 * - `x.code`, `x.error` (and the like) pass on a code some other sink made (an error caught,
 *   a worker's or gateway's answer read back): these are listed by --sites, not counted;
 * - anything else is unresolved, and the check fails on it: a code must be reachable statically.
 * The other way round, a code the code looks for (compared with `x.code`, a key of a const map or a
 * member of a const set that `x.code` is looked up in) must be one something produces.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import ts from "typescript";
import { LAYERS } from "./check-imports.ts";

const ROOT = join(import.meta.dir, "..");
export const CATALOGUE = join(ROOT, "docs", "error-codes.md");

export interface Site {
  code: string;
  file: string;
  line: number;
}
export interface Extraction {
  /** code → the places it is made */
  codes: Map<string, Site[]>;
  /** places a code made elsewhere is passed on */
  passThrough: { file: string; line: number; text: string }[];
  /** places whose code could not be resolved to literals */
  unresolved: { file: string; line: number; text: string }[];
  /** codes the code reacts to: compared with `x.code`, keys of a map or members of a set it reads */
  consumed: Map<string, Site[]>;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of ts.sys.readDirectory(dir, [".ts", ".tsx"], undefined, undefined)) {
    if (entry.includes("/ui/web/") || entry.endsWith(".d.ts")) continue;
    out.push(entry);
  }
  return out.sort();
}

interface Found {
  code: string;
  /** the literal, or the expression of a literal union type */
  at: ts.Node;
}

/** Property names whose value is a code received from elsewhere (read back, caught, relayed). */
const CARRIERS = new Set(["code", "error"]);

export function extractCodes(srcDir = join(ROOT, "src")): Extraction {
  const sources = new Set(sourceFiles(srcDir));
  const program = ts.createProgram([...sources], {
    target: ts.ScriptTarget.ESNext,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    allowImportingTsExtensions: true,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
  });
  const checker = program.getTypeChecker();
  const files = program.getSourceFiles().filter((f) => sources.has(f.fileName));
  const out: Extraction = { codes: new Map(), passThrough: [], unresolved: [], consumed: new Map() };

  // Every call and `new`, indexed by the name it calls, so a parameter can be followed back to its
  // arguments; the checker confirms a candidate only when a parameter asks (cheaper than all).
  const callsByName = new Map<string, (ts.CallExpression | ts.NewExpression)[]>();
  const visitCalls = (node: ts.Node): void => {
    if (ts.isCallExpression(node) || ts.isNewExpression(node)) {
      const callee = node.expression;
      const named = ts.isPropertyAccessExpression(callee) ? callee.name : callee;
      const name = ts.isIdentifier(named) ? named.text : undefined;
      if (name) callsByName.set(name, [...(callsByName.get(name) ?? []), node]);
    }
    ts.forEachChild(node, visitCalls);
  };
  for (const f of files) visitCalls(f);
  const symbolOf = (node: ts.Node): ts.Symbol | undefined => {
    const s = checker.getSymbolAtLocation(node);
    return s && s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
  };
  /** The calls of a function, a method or a const arrow function. */
  const callsOf = (fn: ts.SignatureDeclaration): (ts.CallExpression | ts.NewExpression)[] => {
    const named = ts.isArrowFunction(fn) || ts.isFunctionExpression(fn) ? fn.parent : fn;
    const name = (named as { name?: ts.Node }).name;
    if (!name || !ts.isIdentifier(name)) return [];
    const target = symbolOf(name);
    return (callsByName.get(name.text) ?? []).filter((call) => {
      const callee = call.expression;
      return target !== undefined && symbolOf(ts.isPropertyAccessExpression(callee) ? callee.name : callee) === target;
    });
  };

  const where = (node: ts.Node) => {
    const sf = node.getSourceFile();
    const line = sf.getLineAndCharacterOfPosition(node.getStart()).line + 1;
    return { file: relative(dirname(srcDir), sf.fileName), line };
  };
  const snippet = (node: ts.Node) => node.getText().replace(/\s+/g, " ").slice(0, 100);

  /** The string literals `expr` can hold; records pass-throughs and unresolved places on the way. */
  const resolve = (expr: ts.Expression, seen: Set<ts.Node>): Found[] => {
    if (seen.has(expr)) return [];
    seen.add(expr);
    expr = unwrap(expr);
    if (ts.isStringLiteral(expr) || ts.isNoSubstitutionTemplateLiteral(expr)) return [{ code: expr.text, at: expr }];
    if (ts.isConditionalExpression(expr)) return [...resolve(expr.whenTrue, seen), ...resolve(expr.whenFalse, seen)];
    if (ts.isBinaryExpression(expr) && ALTERNATIVES.includes(expr.operatorToken.kind)) {
      return [...resolve(expr.left, seen), ...resolve(expr.right, seen)];
    }
    const type = checker.getTypeAtLocation(expr);
    const literals = literalUnion(type);
    // A parameter is followed to its calls even when typed by a union: they say who decides.
    const param = ts.isIdentifier(expr) ? parameterOf(expr) : undefined;
    if (param) {
      const found = fromParameter(param, seen);
      if (found.length) return found;
      if (!literals) {
        out.unresolved.push({ ...where(expr), text: `${snippet(expr)} (a parameter no call passes a code to)` });
        return [];
      }
    }
    // A typed code union is placed where the union is declared.
    if (literals) return literals.map((code) => ({ code, at: type.aliasSymbol?.declarations?.[0] ?? expr }));
    if ((ts.isPropertyAccessExpression(expr) && CARRIERS.has(expr.name.text)) || isRelayedHeader(expr)) {
      out.passThrough.push({ ...where(expr), text: snippet(expr) });
      return [];
    }
    if (ts.isElementAccessExpression(expr)) {
      const values = constValues(expr.expression, seen);
      if (values) return values;
    }
    if (expr.kind === ts.SyntaxKind.NullKeyword || (ts.isIdentifier(expr) && expr.text === "undefined")) return [];
    if (ts.isIdentifier(expr)) {
      const decl = declarationOf(expr);
      // `const { code, message } = someError`: the code of an error made elsewhere.
      if (decl && ts.isBindingElement(decl) && CARRIERS.has((decl.propertyName ?? decl.name).getText())) {
        out.passThrough.push({ ...where(expr), text: snippet(decl) });
        return [];
      }
      const isConst = decl && ts.isVariableDeclaration(decl) && ts.getCombinedNodeFlags(decl) & ts.NodeFlags.Const;
      if (isConst && decl.initializer) return resolve(decl.initializer, seen);
    }
    out.unresolved.push({ ...where(expr), text: snippet(expr) });
    return [];
  };

  /** What an identifier names; in `{ code }` the variable, not the property. */
  const declarationOf = (id: ts.Identifier): ts.Declaration | undefined => {
    const shorthand = ts.isShorthandPropertyAssignment(id.parent);
    const symbol = shorthand ? checker.getShorthandAssignmentValueSymbol(id.parent) : checker.getSymbolAtLocation(id);
    return symbol?.valueDeclaration ?? symbol?.declarations?.[0];
  };
  const parameterOf = (id: ts.Identifier): ts.ParameterDeclaration | undefined => {
    const decl = declarationOf(id);
    return decl && ts.isParameter(decl) ? decl : undefined;
  };

  /** The values of a const object or array literal that an element access reads. */
  const constValues = (target: ts.Expression, seen: Set<ts.Node>): Found[] | undefined => {
    if (!ts.isIdentifier(target)) return undefined;
    const decl = checker.getSymbolAtLocation(target)?.valueDeclaration;
    if (!decl || !ts.isVariableDeclaration(decl) || !decl.initializer) return undefined;
    const init = unwrap(decl.initializer);
    if (ts.isObjectLiteralExpression(init)) {
      return init.properties.flatMap((p) => (ts.isPropertyAssignment(p) ? resolve(p.initializer, seen) : []));
    }
    if (ts.isArrayLiteralExpression(init)) return init.elements.flatMap((e) => resolve(e, seen));
    return undefined;
  };

  /** A parameter's values: its default and the argument at its position in every call. */
  const fromParameter = (param: ts.ParameterDeclaration, seen: Set<ts.Node>): Found[] => {
    const fn = param.parent as ts.SignatureDeclaration;
    const index = fn.parameters.indexOf(param);
    const found: Found[] = param.initializer ? resolve(param.initializer, seen) : [];
    for (const call of callsOf(fn)) {
      const arg = call.arguments?.[index];
      if (arg) found.push(...resolve(arg, seen));
    }
    return found;
  };

  // A code is placed where its literal is written (a call's argument, a union type's use), not at
  // the helper that finally builds the error, so "from" names the folder that decides on it.
  const add = (found: Found[]) => {
    for (const { code, at } of found) {
      const list = out.codes.get(code) ?? [];
      list.push({ code, ...where(at) });
      out.codes.set(code, list);
    }
  };

  // The other side: a literal a received code is compared with, a key of the const map or a member
  // of the const set such a code is looked up in. A code nothing produces there is dead logic.
  const consume = (code: string, at: ts.Node) => {
    if (!/^[a-z][a-z0-9_]*$/.test(code) || FOREIGN_CODES.has(code)) return;
    const list = out.consumed.get(code) ?? [];
    list.push({ code, ...where(at) });
    out.consumed.set(code, list);
  };
  const isCarrier = (e: ts.Expression) => ts.isPropertyAccessExpression(e) && CARRIERS.has(e.name.text);
  const constInitializer = (e: ts.Expression): ts.Expression | undefined => {
    const decl = ts.isIdentifier(e) ? declarationOf(e) : undefined;
    return decl && ts.isVariableDeclaration(decl) && decl.initializer ? unwrap(decl.initializer) : undefined;
  };
  const visitConsumers = (node: ts.Node): void => {
    if (ts.isBinaryExpression(node) && EQUALITY.includes(node.operatorToken.kind)) {
      const [carrier, other] = isCarrier(node.left) ? [node.left, node.right] : [node.right, node.left];
      if (isCarrier(carrier) && ts.isStringLiteral(other)) consume(other.text, other);
    }
    if (ts.isSwitchStatement(node) && isCarrier(node.expression)) {
      for (const c of node.caseBlock.clauses) {
        if (ts.isCaseClause(c) && ts.isStringLiteral(c.expression)) consume(c.expression.text, c);
      }
    }
    if (ts.isElementAccessExpression(node) && isCarrier(unwrap(node.argumentExpression))) {
      const init = constInitializer(node.expression);
      if (init && ts.isObjectLiteralExpression(init)) {
        for (const p of init.properties) {
          if (p.name && (ts.isIdentifier(p.name) || ts.isStringLiteral(p.name))) consume(p.name.text, p);
        }
      }
    }
    const call = ts.isCallExpression(node) ? node : undefined;
    const has = call && ts.isPropertyAccessExpression(call.expression) ? call.expression : undefined;
    const arg = call?.arguments[0];
    if (has?.name.text === "has" && arg && isCarrier(unwrap(arg))) {
      const init = constInitializer(has.expression);
      const members = init && ts.isNewExpression(init) ? init.arguments?.[0] : undefined;
      if (members && ts.isArrayLiteralExpression(members)) {
        for (const m of members.elements) if (ts.isStringLiteral(m)) consume(m.text, m);
      }
    }
    ts.forEachChild(node, visitConsumers);
  };

  const hasProperty = (obj: ts.ObjectLiteralExpression, names: string[]) =>
    obj.properties.some((p) => p.name !== undefined && ts.isIdentifier(p.name) && names.includes(p.name.text));

  const visitSinks = (node: ts.Node): void => {
    if (isToolErrorConstruction(node) && node.arguments?.[0]) add(resolve(node.arguments[0], new Set()));
    if (ts.isObjectLiteralExpression(node)) {
      for (const p of node.properties) {
        if (!(ts.isPropertyAssignment(p) || ts.isShorthandPropertyAssignment(p)) || !ts.isIdentifier(p.name)) continue;
        const isCode = p.name.text === "code" && hasProperty(node, ["message"]);
        const isError = p.name.text === "error" && hasProperty(node, ["message", "error_description"]);
        if (!isCode && !isError) continue;
        const value = ts.isPropertyAssignment(p) ? p.initializer : p.name;
        if (isZodIssue(node)) continue;
        // Numbers (JSON-RPC errors, exit codes) and objects are no codes.
        const type = checker.getTypeAtLocation(value);
        if (!(type.isUnion() ? type.types : [type]).some((t) => t.flags & ts.TypeFlags.StringLike)) continue;
        add(resolve(value, new Set()));
      }
    }
    ts.forEachChild(node, visitSinks);
  };
  /** `new ToolError(…)` (imported under any name), or `super(…)` in a class that extends it. */
  const isToolErrorConstruction = (node: ts.Node): node is ts.NewExpression | ts.CallExpression => {
    if (ts.isNewExpression(node)) return symbolOf(node.expression)?.name === "ToolError";
    if (!ts.isCallExpression(node) || node.expression.kind !== ts.SyntaxKind.SuperKeyword) return false;
    const cls = ts.findAncestor(node, ts.isClassLike);
    const base = cls?.heritageClauses?.find((h) => h.token === ts.SyntaxKind.ExtendsKeyword)?.types[0]?.expression;
    return base !== undefined && symbolOf(base)?.name === "ToolError";
  };

  for (const f of files) {
    visitSinks(f);
    visitConsumers(f);
  }
  return out;
}

const EQUALITY = [ts.SyntaxKind.EqualsEqualsEqualsToken, ts.SyntaxKind.ExclamationEqualsEqualsToken];

/** Codes of other vocabularies read off a `.code`: zod's issue codes. */
const FOREIGN_CODES = new Set(["unrecognized_keys"]);

const ALTERNATIVES = [ts.SyntaxKind.QuestionQuestionToken, ts.SyntaxKind.BarBarToken];

/** The expression under parentheses and type assertions. */
function unwrap(expr: ts.Expression): ts.Expression {
  for (;;) {
    if (ts.isParenthesizedExpression(expr) || ts.isNonNullExpression(expr)) expr = expr.expression;
    else if (ts.isAsExpression(expr) || ts.isSatisfiesExpression(expr)) expr = expr.expression;
    else return expr;
  }
}

/** `headers.get("x-transfer-error")`: a code another process's sink made, carried in a header. */
function isRelayedHeader(expr: ts.Expression): boolean {
  if (!ts.isCallExpression(expr) || !ts.isPropertyAccessExpression(expr.expression)) return false;
  const arg = expr.expression.name.text === "get" ? expr.arguments[0] : undefined;
  return arg !== undefined && ts.isStringLiteral(arg) && /^x-[a-z-]*error$/.test(arg.text);
}

/** `ctx.addIssue({ code: "custom", message })`: zod's issue code, no error code of ours. */
function isZodIssue(obj: ts.ObjectLiteralExpression): boolean {
  const call = obj.parent;
  if (!ts.isCallExpression(call) || !ts.isPropertyAccessExpression(call.expression)) return false;
  return call.expression.name.getText() === "addIssue";
}

/** The literals of a string literal type or a union of them (undefined and null ignored). */
function literalUnion(type: ts.Type): string[] | undefined {
  const parts = type.isUnion() ? type.types : [type];
  const literals: string[] = [];
  for (const t of parts) {
    if (t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Null)) continue;
    if (!t.isStringLiteral()) return undefined;
    literals.push(t.value);
  }
  return literals.length ? literals : undefined;
}

/** The folders a code comes from: the top folder under src/, and the tool family under src/tools. */
export function origins(sites: Site[]): string[] {
  const set = new Set(
    sites.map((s) => {
      const parts = s.file.replace(/^src\//, "").split("/");
      if (parts[0] === "tools" && parts.length > 2) return `tools/${parts[1]}`;
      return parts.length > 1 ? parts[0]! : parts[0]!.replace(/\.ts$/, "");
    }),
  );
  return [...set].sort();
}

// ---- the catalogue -------------------------------------------------------------------------------

export interface Row {
  code: string;
  meaning: string;
  from: string;
  section: string;
}

const ROW = /^\| `([a-z0-9_]+)` \| (.*) \| (.*) \|$/;

/** The rows of the catalogue's tables, in order, each under its `## ` section. */
export function parseCatalogue(text: string): Row[] {
  const rows: Row[] = [];
  let section = "";
  for (const line of text.split("\n")) {
    if (line.startsWith("## ")) section = line.slice(3).trim();
    const m = ROW.exec(line);
    if (m) rows.push({ code: m[1]!, meaning: m[2]!.trim(), from: m[3]!.trim(), section });
  }
  return rows;
}

/** The codes the exception and compatibility lists name, each with the heading it is under. */
export function exceptionCodes(text: string): Map<string, string> {
  const out = new Map<string, string>();
  let part = "";
  let list = "";
  // `- \`a\`, \`b\` — reason`, wrapped onto indented lines: the codes before the dash are the entry's.
  const entries: { text: string; list: string }[] = [];
  let open = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("## ")) part = list = line.slice(3);
    if (line.startsWith("### ")) list = line.slice(4);
    if (open && line.startsWith("  ") && line.trim() !== "") {
      entries[entries.length - 1]!.text += ` ${line.trim()}`;
      continue;
    }
    open = /^(Exceptions|Compatibility)\b/.test(part) && line.startsWith("- ");
    if (open) entries.push({ text: line, list });
  }
  for (const e of entries) {
    for (const m of e.text.split(" — ")[0]!.matchAll(/`([a-z0-9_]+)`/g)) out.set(m[1]!, e.list);
  }
  return out;
}

/** First words that name a problem: a code starting with one breaks the `<thing>_<problem>` order. */
const PROBLEM_WORDS = [
  ["invalid", "unknown", "missing", "unsupported", "unexpected", "ambiguous", "duplicate", "malformed"],
  ["bad", "wrong", "illegal", "forbidden", "empty", "insufficient", "too", "no", "not", "is", "already"],
].flat();
export const PROBLEM_FIRST = new RegExp(`^(${PROBLEM_WORDS.join("|")})_`);

export function checkCatalogue(ex: Extraction, text: string): string[] {
  const problems: string[] = [];
  const rows = parseCatalogue(text);
  const listed = new Map<string, Row>();
  for (const r of rows) {
    if (listed.has(r.code)) problems.push(`\`${r.code}\` is listed twice`);
    listed.set(r.code, r);
  }
  for (const u of ex.unresolved) {
    problems.push(`${u.file}:${u.line}: a code the extraction cannot resolve to literals: ${u.text}`);
  }
  for (const [code, sites] of [...ex.codes].sort(([a], [b]) => a.localeCompare(b))) {
    const row = listed.get(code);
    const s = sites[0]!;
    if (!row) {
      problems.push(`\`${code}\` (${s.file}:${s.line}) is not in the catalogue`);
      continue;
    }
    const from = origins(sites).join(", ");
    if (row.from !== from) {
      problems.push(`\`${code}\`: the catalogue says it comes from "${row.from}", the code from "${from}"`);
    }
    if (!row.meaning || row.meaning === "?") problems.push(`\`${code}\` has no meaning written`);
  }
  for (const code of listed.keys()) {
    if (!ex.codes.has(code)) problems.push(`\`${code}\` is in the catalogue but no code in src/ produces it`);
  }
  const exceptions = exceptionCodes(text);
  for (const code of ex.codes.keys()) {
    if (PROBLEM_FIRST.test(code) && !exceptions.has(code)) {
      problems.push(`\`${code}\` puts the problem first; rename it or list it as an exception`);
    }
  }
  for (const code of exceptions.keys()) {
    if (!ex.codes.has(code)) problems.push(`exception \`${code}\` is no code src/ produces`);
  }
  for (const [code, sites] of ex.consumed) {
    const s = sites[0]!;
    if (!ex.codes.has(code)) problems.push(`\`${code}\` (${s.file}:${s.line}) is looked for, but nothing produces it`);
  }
  return problems;
}

/** What each section holds; a section is the lowest layer (check-imports.ts) that makes the code. */
const SECTION_TITLES: Record<string, string> = {
  core: "errors any layer can raise",
  shared: "codes many domains raise",
  config: "settings",
  store: "state files, locks, leases",
  native: "embedded helpers",
  audit: "audit log",
  links: "download links",
  fs: "paths, reading and editing files",
  sessions: "agent sessions",
  exec: "commands, jobs, persistent shells",
  bridge: "Agent Bridge (upstream MCP servers, Skills)",
  transfer: "session_copy and the transfer gateway",
  ssh: "the separate ssh MCP server",
  approvals: "human approval",
  tools: "tool handlers",
  server: "MCP server",
  http: "HTTP listener and REST debug API",
  oauth: "co-hosted OAuth server",
  ui: "Human UI API and terminal socket",
  remote: "remote workers, controller side",
  worker: "remote workers, worker side",
  "mcp-native": "MCP resources and prompts",
  cli: "command line",
  tui: "terminal UI",
};

function layerOf(folder: string): number {
  if (folder === "shared") return 0.5;
  const i = LAYERS.findIndex((layer) => layer.includes(folder));
  return i < 0 ? LAYERS.length : i;
}

/**
 * The section of a code: the lowest layer among the folders that make it (ties: by name); a code
 * that three or more top folders make, none of them core, is in "shared".
 */
export function sectionOf(from: string[]): string {
  const tops = [...new Set(from.map((f) => f.split("/")[0]!))];
  if (tops.length >= 3 && !tops.includes("core")) return "shared";
  return tops.sort((a, b) => layerOf(a) - layerOf(b) || a.localeCompare(b))[0]!;
}

/** Where the exception lists start; everything from there on is prose kept as written. */
const TAIL = "\n## Exceptions";

/** The catalogue with its tables rewritten from the code: meanings kept, rows added and dropped. */
export function rewriteCatalogue(ex: Extraction, text: string): string {
  const known = new Map(parseCatalogue(text).map((r) => [r.code, r]));
  const sections = new Map<string, Row[]>();
  for (const [code, sites] of ex.codes) {
    const from = origins(sites);
    const section = sectionOf(from);
    const list = sections.get(section) ?? [];
    list.push({ code, meaning: known.get(code)?.meaning ?? "?", from: from.join(", "), section });
    sections.set(section, list);
  }
  const head = text.split("\n## ")[0]!.trimEnd();
  const tail = text.includes(TAIL) ? text.slice(text.indexOf(TAIL)).trim() : "";
  const body = [...sections]
    .sort(([a], [b]) => layerOf(a) - layerOf(b) || a.localeCompare(b))
    .map(([section, rows]) => {
      rows.sort((a, b) => a.code.localeCompare(b.code));
      const lines = rows.map((r) => `| \`${r.code}\` | ${r.meaning} | ${r.from} |`);
      const title = SECTION_TITLES[section] ? `${section}: ${SECTION_TITLES[section]}` : section;
      return [`## ${title}`, "", "| code | meaning | from |", "| --- | --- | --- |", ...lines].join("\n");
    });
  return `${[head, ...body, ...(tail ? [tail] : [])].join("\n\n")}\n`;
}

if (import.meta.main) {
  const mode = process.argv[2];
  const ex = extractCodes();
  if (mode === "--check") {
    const problems = checkCatalogue(ex, readFileSync(CATALOGUE, "utf8"));
    for (const p of problems) console.error(p);
    if (problems.length) process.exit(1);
    console.log(`${ex.codes.size} codes, all in docs/error-codes.md`);
  } else if (mode === "--write") {
    writeFileSync(CATALOGUE, rewriteCatalogue(ex, readFileSync(CATALOGUE, "utf8")));
  } else if (mode === "--sites") {
    for (const [code, sites] of [...ex.codes].sort(([a], [b]) => a.localeCompare(b))) {
      console.log(`${code}\n${sites.map((s) => `    ${s.file}:${s.line}`).join("\n")}`);
    }
    for (const p of ex.passThrough) console.log(`pass-through ${p.file}:${p.line}: ${p.text}`);
    for (const u of ex.unresolved) console.log(`UNRESOLVED ${u.file}:${u.line}: ${u.text}`);
    for (const [code, sites] of ex.consumed) {
      console.log(`looked for ${code}: ${sites.map((s) => `${s.file}:${s.line}`).join(" ")}`);
    }
  } else {
    for (const [code, sites] of [...ex.codes].sort(([a], [b]) => a.localeCompare(b))) {
      console.log(`${code}\t${origins(sites).join(", ")}`);
    }
    for (const u of ex.unresolved) console.error(`UNRESOLVED ${u.file}:${u.line}: ${u.text}`);
  }
}
