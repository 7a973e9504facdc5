import { describe, expect, test } from "bun:test";
import { closeSync, fstatSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createRedactor, REDACTED } from "../../src/audit/redact.ts";
import { AuditLog } from "../../src/audit/log.ts";
import { asPayloadRef, canonicalJson } from "../../src/audit/payloads.ts";
import { loadSettings } from "../../src/config/load.ts";
import { LargeStringMemo, rawJsonString } from "../../src/core/large-memo.ts";
import { LineIndexCache, readLines } from "../../src/fs/read.ts";
import { tempDir } from "../helpers/harness.ts";

/** Offers a key twice: a memo admits a key on its second sighting. */
const admit = <V>(m: LargeStringMemo<V>, key: string, value: V) => {
  m.set(key, value);
  m.set(key, value);
};
const big = (seed: string) => `${seed}\n${"const v = f(a, b); // some text\n".repeat(4000)}`;

describe("large string memo", () => {
  test("hits only on equal content, never on a different string of the same length", () => {
    const m = new LargeStringMemo<number>(1 << 20);
    const a = big("aaaa");
    admit(m, a, 1);
    expect(m.get(big("aaaa"))).toBe(1);
    expect(m.get(big("aaab"))).toBeUndefined();
  });

  test("keeps within its byte and entry bounds, dropping the least recently used", () => {
    const keys = ["k1", "k2", "k3", "k4"].map(big);
    const m = new LargeStringMemo<number>(3 * keys[0]!.length * 2, 8);
    admit(m, keys[0]!, 0);
    admit(m, keys[1]!, 1);
    admit(m, keys[2]!, 2);
    expect(m.get(keys[0]!)).toBe(0);
    admit(m, keys[3]!, 3);
    expect(m.size).toBe(3);
    expect(m.get(keys[1]!)).toBeUndefined();
    expect(m.get(keys[0]!)).toBe(0);
    const few = new LargeStringMemo<number>(1 << 30, 2);
    for (const [i, k] of keys.entries()) admit(few, k, i);
    expect(few.size).toBe(2);
    admit(m, "x".repeat(2 << 20), 9);
    expect(m.get("x".repeat(2 << 20))).toBeUndefined();
  });

  test("admits a key seen again among the last few, not keys of a cycle longer than it holds", () => {
    const m = new LargeStringMemo<number>(1 << 30, 3);
    const keys = ["c1", "c2", "c3", "c4", "c5"].map(big);
    m.set(keys[0]!, 0);
    expect(m.get(keys[0]!)).toBeUndefined();
    m.clear();
    for (let round = 0; round < 3; round++)
      for (const [i, k] of keys.entries()) if (m.get(k) === undefined) m.set(k, i);
    expect(m.size).toBe(0);
    m.set(keys[1]!, 1);
    m.set(keys[1]!, 1);
    expect(m.get(keys[1]!)).toBe(1);
  });

  test("lets go of everything after a quiet spell", async () => {
    const m = new LargeStringMemo<number>(1 << 20);
    admit(m, big("q"), 1);
    expect(m.size).toBe(1);
    const deadline = Date.now() + 10_000;
    while (m.size > 0 && Date.now() < deadline) await Bun.sleep(50);
    expect(m.size).toBe(0);
  });

  test("escaped JSON is the same text JSON.stringify makes", () => {
    const s = `${big('"quoted"\t\u0001 é \ud83d\ude00')}\\`;
    const obj = { a: s, b: [s], c: "small" };
    const viaRaw = JSON.stringify(obj, (_k, v: unknown) =>
      typeof v === "string" && v.length > 1000 ? rawJsonString(v) : v,
    );
    expect(viaRaw).toBe(JSON.stringify(obj));
    expect(
      JSON.stringify(obj, (_k, v: unknown) => (typeof v === "string" && v.length > 1000 ? rawJsonString(v) : v)),
    ).toBe(viaRaw);
    expect(canonicalJson({ z: s, a: 1 })).toBe(`{"a":1,"z":${JSON.stringify(s)}}`);
  });

  test("a large text seen before is redacted the same way, a changed one afresh", () => {
    const r = createRedactor([], 1 << 20);
    const clean = big("nothing secret");
    expect(r.text(clean)).toBe(clean);
    expect(r.text(clean)).toBe(clean);
    const leaky = `${clean}Authorization: Bearer abcdefgh12345678\n`;
    for (let i = 0; i < 2; i++) {
      const out = r.text(leaky);
      expect(out).not.toContain("abcdefgh12345678");
      expect(out).toContain(REDACTED);
    }
  });
});

describe("whole-file reads of content seen before", () => {
  const read = (path: string) => {
    const fd = openSync(path, "r");
    try {
      return readLines(fd, fstatSync(fd), [], 1 << 20, new LineIndexCache(), path);
    } finally {
      closeSync(fd);
    }
  };

  test("a changed file renders its new content; unchanged bytes render the same", () => {
    using dir = tempDir();
    const p = join(dir.path, "f.txt");
    writeFileSync(p, big("first"));
    const a = read(p).render("[f.txt#1]");
    expect(read(p).render("[f.txt#1]")).toBe(a);
    expect(a.startsWith("[f.txt#1]\n1:first\n2:const")).toBe(true);
    writeFileSync(p, big("second"));
    const b = read(p);
    expect(b.render("[f.txt#1]").startsWith("[f.txt#1]\n1:second\n")).toBe(true);
    expect(b.raw).toBe(big("second"));
    expect(read(p).render("[f.txt#2]").startsWith("[f.txt#2]\n1:second\n")).toBe(true);
  });

  test("bytes that are not UTF-8 are refused on every read", () => {
    using dir = tempDir();
    const p = join(dir.path, "bin.dat");
    writeFileSync(p, Buffer.from([0x61, 0xff, 0xfe, 0x0a]));
    for (let i = 0; i < 2; i++) expect(() => read(p)).toThrow(/not UTF-8/);
  });
});

describe("audit payloads of large values recorded again", () => {
  test("the same output resolves to the same content each time, a changed one to its own", async () => {
    using dir = tempDir();
    const log = new AuditLog(
      loadSettings({ env: {}, flags: { workspace_root: dir.path, state_dir: join(dir.path, "state") } }),
    );
    const first = { kind: "file", content: big("same") };
    const changed = { kind: "file", content: big("other") };
    for (const output of [first, first, first, changed, first]) {
      log.record("tool_call_end", { call_id: "c", tool: "read", ok: true, output });
      await log.flush();
    }
    const refs = readFileSync(log.file, "utf8")
      .trim()
      .split("\n")
      .map((l) => asPayloadRef((JSON.parse(l) as { output: unknown }).output)!);
    const now = Date.now() / 1000;
    expect(refs.map((r) => r.sha256)).toEqual([
      refs[0]!.sha256,
      refs[0]!.sha256,
      refs[0]!.sha256,
      refs[3]!.sha256,
      refs[0]!.sha256,
    ]);
    expect(refs[3]!.sha256).not.toBe(refs[0]!.sha256);
    expect(log.payloads.resolve(refs[4]!, now)).toEqual({ status: "ok", value: first });
    expect(log.payloads.resolve(refs[3]!, now)).toEqual({ status: "ok", value: changed });
  });
});
