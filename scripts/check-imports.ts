/**
 * Checks the static imports of src/**\/*.ts against the layering in docs/architecture.md: no import
 * cycles between files, and no import from a lower layer up into a higher one.
 * Usage: bun scripts/check-imports.ts [--graph]   (exit 1 and a list of findings when it fails;
 * --graph prints the folder-level dependencies). test/scripts/check-imports.test.ts runs it.
 *
 * What counts: `import … from`, `export … from` and bare `import "…"` with a relative specifier
 * that resolves inside src/, `import type` included (a type is a dependency too). A cycle of
 * runtime imports always fails; a cycle that closes only through type imports (erased, so no
 * evaluation-order problem, but still a knot in the design) fails unless ALLOWED_TYPE_CYCLES names
 * it with its reason. Dynamic
 * `import()` is a lazy load by design (commands, tool modules) and is not a static dependency.
 * `with { type: "file" }` embeds a file's bytes, not its code, so it is no dependency either.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

/**
 * Layers, lowest first. A file may import its own folder and anything in a lower layer; folders of
 * one layer may import each other (file cycles are still refused). Top-level files of src/ (main.ts,
 * types.d.ts) sit above everything.
 */
export const LAYERS: string[][] = [
  ["core"],
  ["config", "store"],
  // native extracts the embedded helpers; audit and links are stores of their own.
  ["native", "audit", "links"],
  // The domains docs/architecture.md names together: exec and sessions know each other's types,
  // and the orientation describes exec's cgroup layer.
  ["fs", "sessions", "exec"],
  // Domains built on exec and fs: agent bridge, file transfer, the separate ssh server.
  // approvals: the policy and queue of human approval, built on exec's command matcher and audit.
  ["bridge", "transfer", "ssh", "approvals"],
  ["tools"],
  // Transports and what they host: the MCP server, HTTP, OAuth, the Human UI's API, remote workers.
  ["server", "http", "oauth", "ui", "remote", "worker", "mcp-native"],
  ["cli", "tui"],
];

/**
 * Imports that go up a layer on purpose, each with its reason. A key is `from-file -> to-file`,
 * both relative to src/.
 */
export const ALLOWED_UPWARD: Record<string, string> = {};

/**
 * Cycles that close only through `import type`, each named by its files (sorted, joined by " <-> ")
 * with the reason it stays.
 */
export const ALLOWED_TYPE_CYCLES: Record<string, string> = {};

export interface ImportEdge {
  from: string;
  to: string;
  typeOnly: boolean;
}

const STATEMENT = /(?:^|[;\n])\s*(import|export)\s+(type\s+)?(?:[\w*${}\s,]*?\s+from\s+)?["']([^"']+)["']([^;\n]*)/g;

/** The static imports of one file's source, as written. */
export function parseImports(source: string): Array<{ specifier: string; typeOnly: boolean }> {
  const out: Array<{ specifier: string; typeOnly: boolean }> = [];
  // Comments would otherwise hide or fake statements (a JSDoc example, say).
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  for (const m of code.matchAll(STATEMENT)) {
    const [, , type, specifier, tail] = m;
    if (/type:\s*["']file["']/.test(tail!)) continue;
    out.push({ specifier: specifier!, typeOnly: type !== undefined || onlyTypes(m[0].trim().replace(/^;\s*/, "")) });
  }
  return out;
}

/** Whether every name in `import { … }` is marked `type` (then the import is erased too). */
function onlyTypes(statement: string): boolean {
  const names = /\{([^}]*)\}/.exec(statement)?.[1];
  if (!names || /^\s*(import|export)\s+\w+\s*,/.test(statement)) return false;
  return names
    .split(",")
    .map((n) => n.trim())
    .filter(Boolean)
    .every((n) => n.startsWith("type "));
}

function listTs(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      // The Human UI's browser app is a separate program with its own tsconfig and build.
      if (path.endsWith(join("ui", "web"))) continue;
      out.push(...listTs(path));
    } else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) out.push(path);
  }
  return out;
}

/** Every static import between files of `srcDir`, paths relative to it. */
export function importGraph(srcDir: string): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const file of listTs(srcDir)) {
    for (const { specifier, typeOnly } of parseImports(readFileSync(file, "utf8"))) {
      if (!specifier.startsWith(".")) continue;
      const target = resolve(dirname(file), specifier);
      const rel = relative(srcDir, target);
      if (rel.startsWith("..") || !existsSync(target)) continue;
      edges.push({ from: relative(srcDir, file), to: rel, typeOnly });
    }
  }
  return edges;
}

/** The folder a file belongs to (its first path component), or "" for top-level files. */
const folderOf = (file: string) => (file.includes("/") ? file.slice(0, file.indexOf("/")) : "");

function rank(folder: string): number | undefined {
  if (folder === "") return LAYERS.length;
  const i = LAYERS.findIndex((layer) => layer.includes(folder));
  return i < 0 ? undefined : i;
}

/** Import cycles: strongly connected components of more than one file, or a file importing itself. */
export function findCycles(edges: ImportEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  let counter = 0;
  // Tarjan's algorithm, iterative so a deep graph cannot overflow the call stack.
  for (const root of next.keys()) {
    if (index.has(root)) continue;
    const work: Array<{ node: string; i: number }> = [{ node: root, i: 0 }];
    index.set(root, counter);
    low.set(root, counter++);
    stack.push(root);
    onStack.add(root);
    while (work.length) {
      const top = work.at(-1)!;
      const succ = next.get(top.node) ?? [];
      if (top.i < succ.length) {
        const w = succ[top.i++]!;
        if (!index.has(w)) {
          index.set(w, counter);
          low.set(w, counter++);
          stack.push(w);
          onStack.add(w);
          work.push({ node: w, i: 0 });
        } else if (onStack.has(w)) low.set(top.node, Math.min(low.get(top.node)!, index.get(w)!));
        continue;
      }
      work.pop();
      if (work.length) low.set(work.at(-1)!.node, Math.min(low.get(work.at(-1)!.node)!, low.get(top.node)!));
      if (low.get(top.node) === index.get(top.node)) {
        const component: string[] = [];
        let w: string;
        do {
          w = stack.pop()!;
          onStack.delete(w);
          component.push(w);
        } while (w !== top.node);
        if (component.length > 1 || succ.includes(top.node)) cycles.push(component.sort());
      }
    }
  }
  return cycles;
}

/** Imports that point up a layer (or into a folder no layer names), minus the allowed ones. */
export function findUpward(edges: ImportEdge[], allowed: Record<string, string> = ALLOWED_UPWARD): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const from = folderOf(e.from);
    const to = folderOf(e.to);
    if (from === to) continue;
    const rf = rank(from);
    const rt = rank(to);
    if (rf === undefined || rt === undefined) {
      out.push(
        `${e.from} -> ${e.to}: folder ${rf === undefined ? from : to} is in no layer (add it to LAYERS in ` +
          `scripts/check-imports.ts)`,
      );
      continue;
    }
    if (rt > rf && !(`${e.from} -> ${e.to}` in allowed))
      out.push(`${e.from} -> ${e.to}: ${from} (layer ${rf}) imports ${to} (layer ${rt})`);
  }
  return out;
}

/** Every finding for the tree at `srcDir`: cycles, upward imports, allow-list entries gone stale. */
export function checkImports(srcDir: string): { edges: ImportEdge[]; findings: string[] } {
  const edges = importGraph(srcDir);
  const runtimeCycles = findCycles(edges.filter((e) => !e.typeOnly)).map((c) => c.join(" <-> "));
  const typeCycles = findCycles(edges)
    .map((c) => c.join(" <-> "))
    .filter((c) => !runtimeCycles.includes(c));
  const findings = [
    ...runtimeCycles.map((c) => `cycle: ${c}`),
    ...typeCycles.filter((c) => !(c in ALLOWED_TYPE_CYCLES)).map((c) => `cycle through import type: ${c}`),
    ...findUpward(edges).map((u) => `upward: ${u}`),
    ...Object.keys(ALLOWED_UPWARD)
      .filter((k) => !edges.some((e) => `${e.from} -> ${e.to}` === k))
      .map((k) => `allow-list entry no longer needed: ${k}`),
    ...Object.keys(ALLOWED_TYPE_CYCLES)
      .filter((k) => !typeCycles.includes(k))
      .map((k) => `allow-list entry no longer needed: ${k}`),
  ];
  return { edges, findings };
}

if (import.meta.main) {
  const { edges, findings } = checkImports(join(import.meta.dir, "..", "src"));
  if (process.argv.includes("--graph")) {
    const pairs = new Set(
      edges
        .map((e) => `${folderOf(e.from) || "(top)"} -> ${folderOf(e.to) || "(top)"}`)
        .filter((p) => !/^(\S+) -> \1$/.test(p)),
    );
    console.log([...pairs].sort().join("\n"));
  }
  for (const f of findings) console.error(f);
  if (findings.length) process.exit(1);
  console.log(`imports ok: ${edges.length} static imports, no cycles, none upward`);
}
