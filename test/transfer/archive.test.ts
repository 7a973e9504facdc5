import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import {
  closeSync,
  existsSync,
  linkSync,
  mkdirSync,
  rmSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { LocalTransferEndpoint } from "../../src/transfer/local-endpoint.ts";
import { TarWriter } from "../../src/transfer/tar.ts";
import { tempDir, type TempDir } from "../helpers/harness.ts";

/** Directory transfers (spec §2.3): what pack refuses and what unpack checks before extracting. */

let dir: TempDir;
let ws: string;
let tmp: string;
let ep: LocalTransferEndpoint;
const code = async (p: Promise<unknown>) =>
  p.then(
    () => "ok",
    (e: { code?: string }) => e.code ?? String(e),
  );

beforeEach(() => {
  dir = tempDir("lsm-arch-");
  ws = join(dir.path, "ws");
  mkdirSync(ws);
  const state = join(dir.path, "state");
  mkdirSync(state, { mode: 0o700 });
  tmp = join(realpathSync(state), "tmp");
  ep = new LocalTransferEndpoint({
    policy: { root: ws, workdir: ws, stateDir: realpathSync(state), denylist: ["secrets"] },
    stateDir: realpathSync(state),
    limits: { maxEntries: 5, maxUnpackedBytes: 1000 },
    pathLock: async (_p, fn) => fn(),
  });
});
afterEach(() => dir[Symbol.dispose]());

/** An archive in the endpoint's temp dir, written member by member. */
function archive(members: Array<[string, "file" | "dir", string]>, gz = false): { temp: true; path: string } {
  mkdirSync(tmp, { recursive: true, mode: 0o700 });
  const name = `remote-transfer-${Math.random().toString(36).slice(2, 12)}.tar`;
  const fd = openSync(join(tmp, name), "w");
  const w = new TarWriter(fd);
  for (const [n, type, body] of members) {
    w.entry(n, type, 0o644, Buffer.byteLength(body));
    if (type === "file") {
      w.data(Buffer.from(body));
      w.pad(Buffer.byteLength(body));
    }
  }
  w.end();
  closeSync(fd);
  if (!gz) return { temp: true, path: name };
  writeFileSync(join(tmp, `${name}.gz`), gzipSync(readFileSync(join(tmp, name))));
  return { temp: true, path: `${name}.gz` };
}

/** An archive made by GNU tar from a directory in the workspace (for link members). */
function gnuTar(from: string, ...members: string[]): { temp: true; path: string } {
  mkdirSync(tmp, { recursive: true, mode: 0o700 });
  const name = `remote-transfer-${Math.random().toString(36).slice(2, 12)}.tar`;
  const r = Bun.spawnSync(["tar", "-cf", join(tmp, name), "-C", from, ...members]);
  if (r.exitCode !== 0) throw new Error(r.stderr.toString());
  return { temp: true, path: name };
}

const unpack = (a: { temp: true; path: string }, dst = "out") =>
  ep.unpackArchive(a, { path: dst }, { overwrite: true, cleanup_archive: true });
const leftovers = () => readdirSync(ws).filter((n) => n.startsWith("."));

describe("unpack validates every member before writing", () => {
  test("a good archive (also gzipped) lands atomically", async () => {
    const r = await unpack(
      archive(
        [
          ["d", "dir", ""],
          ["d/f.txt", "file", "hi"],
          ["g.txt", "file", "there"],
        ],
        true,
      ),
    );
    expect(r).toMatchObject({ entries: 3, completed: true, archive_deleted: true, cleanup_errors: [] });
    expect(readFileSync(join(ws, "out", "d", "f.txt"), "utf8")).toBe("hi");
    expect(leftovers()).toEqual([]);
  });

  test.each([
    ["../evil", "archive_invalid"],
    ["/abs", "archive_invalid"],
    ["a/../../x", "archive_invalid"],
    ["./x", "archive_invalid"],
  ])("member %p is refused", async (name, want) => {
    expect(await code(unpack(archive([[name, "file", "x"]])))).toBe(want);
    expect(existsSync(join(ws, "out"))).toBe(false);
    expect(existsSync(join(dir.path, "evil"))).toBe(false);
    expect(leftovers()).toEqual([]);
  });

  test("duplicates, too many entries, too many bytes and a gzip bomb are refused", async () => {
    expect(
      await code(
        unpack(
          archive([
            ["a", "file", "1"],
            ["a", "file", "2"],
          ]),
        ),
      ),
    ).toBe("archive_invalid");
    expect(
      await code(
        unpack(archive(Array.from({ length: 6 }, (_, i) => [`f${i}`, "file", "x"] as [string, "file", string]))),
      ),
    ).toBe("transfer_too_many_entries");
    expect(await code(unpack(archive([["big", "file", "x".repeat(1001)]])))).toBe("transfer_too_large");
    expect(await code(unpack(archive([["big", "file", "\0".repeat(200_000)]], true)))).toBe("transfer_too_large");
    expect(existsSync(join(ws, "out"))).toBe(false);
    expect(leftovers()).toEqual([]);
  });

  test("symbolic and hard link members are refused", async () => {
    mkdirSync(join(ws, "src"));
    writeFileSync(join(ws, "src", "f"), "x");
    symlinkSync("/etc/passwd", join(ws, "src", "link"));
    expect(await code(unpack(gnuTar(join(ws, "src"), "link")))).toBe("archive_invalid");
    linkSync(join(ws, "src", "f"), join(ws, "src", "hard"));
    rmSync(join(ws, "src", "link"));
    // GNU tar stores the second name of a file as a hard link member.
    expect(await code(unpack(gnuTar(join(ws, "src"), "f", "hard")))).toBe("archive_invalid");
    expect(existsSync(join(ws, "out"))).toBe(false);
  });

  test("overwrite=false keeps a non-empty destination; an empty directory may be filled", async () => {
    mkdirSync(join(ws, "full"));
    writeFileSync(join(ws, "full", "keep"), "k");
    expect(
      await code(
        ep.unpackArchive(archive([["a", "file", "1"]]), { path: "full" }, { overwrite: false, cleanup_archive: true }),
      ),
    ).toBe("destination_exists");
    expect(readdirSync(join(ws, "full"))).toEqual(["keep"]);
    mkdirSync(join(ws, "empty"));
    await ep.unpackArchive(
      archive([["a", "file", "1"]]),
      { path: "empty" },
      { overwrite: false, cleanup_archive: true },
    );
    expect(readdirSync(join(ws, "empty"))).toEqual(["a"]);
    expect(leftovers()).toEqual([]);
  });
});

describe("pack refuses what a directory copy cannot carry", () => {
  test("special files, denied paths and a symlinked source", async () => {
    mkdirSync(join(ws, "t"));
    Bun.spawnSync(["mkfifo", join(ws, "t", "pipe")]);
    expect(await code(ep.packDir({ path: "t" }, "none"))).toBe("special_file_refused");
    mkdirSync(join(ws, "u", "secrets"), { recursive: true });
    expect(await code(ep.packDir({ path: "u" }, "none"))).toBe("path_denied");
    mkdirSync(join(ws, "v"));
    symlinkSync("v", join(ws, "vlink"));
    expect(await code(ep.packDir({ path: "vlink" }, "none"))).toBe("symlink_refused");
    expect(readdirSync(tmp).filter((n) => n.startsWith("transfer-pack-"))).toEqual([]);
  });
});
