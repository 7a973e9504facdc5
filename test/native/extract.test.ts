import { describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { extractHelper, helperLocation, unsafeChain } from "../../src/native/extract.ts";
import { tempDir } from "../helpers/harness.ts";

const EXTRACT = join(import.meta.dir, "..", "..", "src", "native", "extract.ts");

/** Extracts in a fresh process, as a new server start would (no in-memory result to reuse). */
async function extractFresh(name: string, source: string, dir: string): Promise<string> {
  const p = Bun.spawn(
    [
      process.execPath,
      "-e",
      `const { extractHelper } = await import(${JSON.stringify(EXTRACT)}); console.log(await ` +
        `extractHelper(${JSON.stringify(name)}, ${JSON.stringify(source)}, ${JSON.stringify(dir)}));`,
    ],
    { stdout: "pipe", stderr: "pipe" },
  );
  const [out, code] = await Promise.all([new Response(p.stdout).text(), p.exited]);
  if (code !== 0) throw new Error(`extraction failed: ${await new Response(p.stderr).text()}`);
  return out.trim();
}

function sha(path: string): string {
  return new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex");
}

describe("embedded helper extraction", () => {
  test("writes an owner-private executable copy whose digest matches", async () => {
    using dir = tempDir();
    const source = join(dir.path, "payload");
    writeFileSync(source, "#!/bin/sh\necho extracted\n");
    const target = await extractHelper("demo", source, join(dir.path, "helpers", "v1"));
    expect(sha(target)).toBe(sha(source));
    expect(statSync(target).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir.path, "helpers", "v1")).mode & 0o777).toBe(0o700);
    expect(Bun.spawnSync([target]).stdout.toString()).toBe("extracted\n");
  });

  test("a tampered or loosened copy is replaced, not trusted", async () => {
    using dir = tempDir();
    const source = join(dir.path, "payload");
    writeFileSync(source, "#!/bin/sh\necho genuine\n");
    const helpers = join(dir.path, "h");
    const first = await extractFresh("tamper", source, helpers);
    writeFileSync(first, "#!/bin/sh\necho evil\n");
    const again = await extractFresh("tamper", source, helpers);
    expect(again).toBe(first);
    expect(Bun.spawnSync([again]).stdout.toString()).toBe("genuine\n");
    chmodSync(again, 0o777);
    const third = await extractFresh("tamper", source, helpers);
    expect(statSync(third).mode & 0o777).toBe(0o700);
  });

  test("a valid copy in a loosened folder is trusted only after the folder is private again", async () => {
    using dir = tempDir();
    const source = join(dir.path, "payload");
    writeFileSync(source, "#!/bin/sh\necho genuine\n");
    const helpers = join(dir.path, "loose");
    await extractFresh("loose", source, helpers);
    chmodSync(helpers, 0o777);
    const again = await extractFresh("loose", source, helpers);
    expect(Bun.spawnSync([again]).stdout.toString()).toBe("genuine\n");
    expect(statSync(helpers).mode & 0o777).toBe(0o700);
  });

  test("concurrent extractions in several processes agree", async () => {
    using dir = tempDir();
    const source = join(dir.path, "payload");
    writeFileSync(source, Buffer.alloc(512 * 1024, 7));
    const helpers = join(dir.path, "shared");
    const outs = await Promise.all(Array.from({ length: 4 }, () => extractFresh("big", source, helpers)));
    for (const out of outs) expect(sha(out)).toBe(sha(source));
  });

  test("every folder from the cache root down must be ours and closed to others", () => {
    using dir = tempDir();
    const root = join(dir.path, "cache");
    const deep = join(root, "local-shell-mcp", "helpers", "b");
    expect(unsafeChain(root, deep)).toBeUndefined();
    mkdirSync(deep, { recursive: true, mode: 0o700 });
    expect(unsafeChain(root, deep)).toBeUndefined();
    chmodSync(root, 0o1777);
    expect(unsafeChain(root, deep)).toBe("the helper cache root is writable by others");
    chmodSync(root, 0o700);
    expect(unsafeChain(root, join(dir.path, "elsewhere"))).toBe("the helper folder lies outside its cache root");
    // A root that is a link to a private folder is judged by that folder; a link further down is not a folder.
    const linked = join(dir.path, "linked-cache");
    symlinkSync(root, linked);
    expect(unsafeChain(linked, join(linked, "local-shell-mcp", "helpers", "b"))).toBeUndefined();
    symlinkSync(join(root, "local-shell-mcp", "helpers"), join(root, "local-shell-mcp", "other"));
    expect(unsafeChain(root, join(root, "local-shell-mcp", "other", "b"))).toBe(
      "a helper cache folder is not a directory",
    );
  });

  test("a loose XDG cache root falls back to the home cache", () => {
    using dir = tempDir();
    const shared = join(dir.path, "shared");
    mkdirSync(shared, { mode: 0o777 });
    chmodSync(shared, 0o777);
    const own = helperLocation({ XDG_CACHE_HOME: join(dir.path, "private") });
    expect(own.root).toBe(join(dir.path, "private"));
    const fallback = helperLocation({ XDG_CACHE_HOME: shared });
    expect(fallback.root).not.toBe(shared);
  });
});
