import { describe, expect, test } from "bun:test";
import { gunzipSync } from "node:zlib";
import { ToolError } from "../../src/core/errors.ts";
import { MAX_PAX_BYTES, TarScanner } from "../../src/transfer/tar.ts";
import { rawHeader, smallTar, zeroBomb } from "../helpers/hostile-archives.ts";

/**
 * The tar scanner never trusts a size an archive declares: each header is checked against the
 * limits as it arrives, and nothing is allocated from a declared size (issue 23, item 1).
 */

const limits = { maxEntries: 10, maxUnpackedBytes: 1 << 20 };

function refusal(feed: (s: TarScanner) => void, l = limits): string {
  const s = new TarScanner(l);
  try {
    feed(s);
    s.finish();
    return "accepted";
  } catch (e) {
    if (!(e instanceof ToolError)) throw e;
    return e.code;
  }
}

describe("declared sizes", () => {
  test("a pax header declaring 3 GiB is refused at its header, before any of it is read", () => {
    const bomb = gunzipSync(zeroBomb(rawHeader("PaxHeader", "x", 3 * 1024 ** 3), 4096));
    const s = new TarScanner(limits);
    expect(() => s.feed(bomb.subarray(0, 512))).toThrow(`above ${MAX_PAX_BYTES}`);
  });

  test("a member declaring more than the unpacked limit is refused at its header", () => {
    expect(refusal((s) => s.feed(rawHeader("big", "0", (1 << 20) + 1)))).toBe("transfer_too_large");
    // Two members that fit alone but not together.
    expect(
      refusal((s) => s.feed(Buffer.concat([rawHeader("a", "0", 0), rawHeader("b", "0", 0)])), {
        maxEntries: 1,
        maxUnpackedBytes: 10,
      }),
    ).toBe("transfer_too_many_entries");
  });

  test("a size that is not octal, two sizes, a long name and a link are refused", () => {
    const bad = rawHeader("f", "0", 0);
    bad.write("9", 124, "ascii");
    expect(refusal((s) => s.feed(bad))).toBe("archive_invalid");
    const pax = Buffer.from("12 size=100\n");
    const twoSizes = Buffer.concat([
      rawHeader("PaxHeader", "x", pax.length),
      pax,
      Buffer.alloc(512 - pax.length),
      rawHeader("f", "0", 5),
    ]);
    expect(refusal((s) => s.feed(twoSizes))).toBe("archive_invalid");
    const longPath = `${"d/".repeat(2100)}f`;
    const rec = ` path=${longPath}\n`;
    const len = String(rec.length + 5).length + rec.length;
    const longPax = Buffer.from(`${len}${rec}`);
    const long = Buffer.concat([
      rawHeader("PaxHeader", "x", longPax.length),
      longPax,
      Buffer.alloc(512 - (longPax.length % 512)),
      rawHeader("f", "0", 0),
    ]);
    expect(refusal((s) => s.feed(long))).toBe("archive_invalid");
    expect(refusal((s) => s.feed(smallTar([{ name: "l", type: "2" }])))).toBe("archive_invalid");
  });

  test("an archive cut short or never ended is refused; a good one fed byte by byte is listed", () => {
    expect(refusal((s) => s.feed(rawHeader("f", "0", 100)))).toBe("archive_invalid");
    expect(refusal((s) => s.feed(smallTar([{ name: "f", body: "x" }]).subarray(0, 1024)))).toBe("archive_invalid");
    const good = smallTar([
      { name: "d", type: "5" },
      { name: "d/f", body: "hello" },
    ]);
    const s = new TarScanner(limits);
    for (let i = 0; i < good.length; i++) s.feed(good.subarray(i, i + 1));
    expect(s.finish().map((m) => [m.name, m.type, m.size, m.dataOffset])).toEqual([
      ["d", "dir", 0, 512],
      ["d/f", "file", 5, 1024],
    ]);
  });
});
