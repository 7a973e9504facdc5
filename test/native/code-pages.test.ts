import { describe, expect, test } from "bun:test";
import { CodePages, parseSmaps, releasable } from "../../src/native/code-pages.ts";

/** Which mappings the idle release may unmap: a wrong pick would lose data or touch other files. */
const EXE = "/opt/lsm/local-shell-mcp";
function mapping(range: string, perms: string, path: string, rssKb: number, anonKb: number): string {
  return (
    `${range} ${perms} 00000000 08:01 1234 ${path}\nSize: 100 kB\nRss: ${rssKb} kB\nPss: ${rssKb} ` +
    `kB\nAnonymous: ${anonKb} kB\nVmFlags: rd mr mw me\n`
  );
}
const SMAPS = [
  mapping("00200000-01a38000", "r--p", EXE, 5000, 0), // constant data
  mapping("01a40000-06836000", "r-xp", EXE, 26000, 0), // machine code
  mapping("06836000-06838000", "rw-p", EXE, 8, 8), // written data
  mapping("06838000-06a0d000", "rw-p", EXE, 6000, 0), // writable, clean so far: never touched
  mapping("06a0d000-06a0e000", "r--p", EXE, 4, 4), // relocated, then made read-only (copied on write)
  mapping("7f0000000000-7f0000100000", "r-xp", "/usr/lib/x86_64-linux-gnu/libc.so.6", 1000, 0), // another file
  mapping("7f0000200000-7f0000300000", "rw-p", "", 16000, 16000), // heap
  mapping("7f0000400000-7f0000500000", "r-xp", EXE, 0, 0), // nothing resident
].join("");

describe("code-pages mapping selection", () => {
  test("parses ranges, permissions, paths and the resident and anonymous sizes", () => {
    const maps = parseSmaps(SMAPS);
    expect(maps).toHaveLength(8);
    expect(maps[1]).toEqual({
      start: 0x01a40000n,
      end: 0x06836000n,
      perms: "r-xp",
      path: EXE,
      rssBytes: 26000 * 1024,
      anonBytes: 0,
    });
    expect(maps[6]!.path).toBe("");
  });

  test("picks only the executable's read-only mappings with no copied page and something resident", () => {
    const picked = releasable(parseSmaps(SMAPS), EXE).map((m) => m.start);
    expect(picked).toEqual([0x00200000n, 0x01a40000n]);
  });

  test("a replaced executable is matched by the name the kernel shows for it", () => {
    const deleted = mapping("01a40000-06836000", "r-xp", `${EXE} (deleted)`, 100, 0);
    expect(releasable(parseSmaps(deleted), `${EXE} (deleted)`)).toHaveLength(1);
    expect(releasable(parseSmaps(deleted), EXE)).toHaveLength(0);
  });
});

describe("code-pages in this process", () => {
  test(
    "drops this runtime's read-only pages and the process " + "runs on (they come back from the page cache)",
    async () => {
      const released = await new CodePages().release();
      if (process.platform !== "linux") {
        expect(released).toBeNull();
        return;
      }
      // bun itself is the executable here: its machine code was resident, so something was dropped.
      expect(released).not.toBeNull();
      expect(released!.bytes).toBeGreaterThan(1024 * 1024);
      // Code that needs the dropped pages (parser, regexp engine, hashing) still runs correctly.
      expect(JSON.parse('{"a":[1,2,3]}').a).toEqual([1, 2, 3]);
      expect(/n(\d+)/.exec("n42")![1]).toBe("42");
      expect(new Bun.CryptoHasher("sha256").update("abc").digest("hex")).toBe(
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      );
    },
  );
});
