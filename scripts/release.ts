/**
 * Builds a release archive for linux-x64 under release/out/ with a SHA256SUMS file.
 * Usage: bun scripts/release.ts
 */
import { $ } from "bun";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import pkg from "../package.json" with { type: "json" };

const root = resolve(import.meta.dir, "..");
const name = `local-shell-mcp-${pkg.version}-linux-x64`;
const out = join(root, "release", "out");
const stage = join(out, name);
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });
await $`${process.execPath} ${join(root, "scripts", "build.ts")} --outfile ${join(stage, "local-shell-mcp")}`;
for (const f of ["NOTICE", "README.md"]) copyFileSync(join(root, f), join(stage, f));
const archive = `${name}.tar.gz`;
await $`tar -C ${out} --owner=0 --group=0 --numeric-owner --sort=name -czf ${join(out, archive)} ${name}`;
const digest = new Bun.CryptoHasher("sha256").update(readFileSync(join(out, archive))).digest("hex");
writeFileSync(join(out, "SHA256SUMS"), `${digest}  ${archive}\n`);
rmSync(stage, { recursive: true, force: true });
console.error(`wrote ${join(out, archive)}\n${digest}`);
