import { describe, expect, test } from "bun:test";
import { type LineBound, LineSplitter } from "../../src/core/line-splitter.ts";

function collect(bound: LineBound, chunks: string[]) {
  const events: string[] = [];
  const splitter = new LineSplitter(bound, {
    line: (b) => events.push(`line:${b.toString("utf8")}`),
    oversized: (bytes, head) => events.push(`oversized:${bytes}:${head.toString("utf8")}`),
  });
  for (const c of chunks) splitter.push(Buffer.from(c));
  return { events, splitter };
}

describe("LineSplitter", () => {
  test("joins lines split across chunks and keeps a carriage return for the reader", () => {
    const { events } = collect({ maxLineBytes: 0, onOverflow: "discard" }, [
      '{"a"',
      ":1}\n{",
      '"b":2}\r\n',
      "\npartial",
    ]);
    expect(events).toEqual(['line:{"a":1}', 'line:{"b":2}\r', "line:"]);
  });

  test("a line of exactly the bound passes; one byte more is oversized", () => {
    const { events } = collect({ maxLineBytes: 4, onOverflow: "discard" }, ["abcd\nabcde\n"]);
    expect(events).toEqual(["line:abcd", "oversized:5:"]);
  });

  test("discard: an oversized line is counted to its end, its head kept, and the next line still arrives", () => {
    const { events, splitter } = collect({ maxLineBytes: 8, onOverflow: "discard", headBytes: 6 }, [
      '{"id":7',
      ',"x":"yyyy',
      "yyyyyy",
      '"}\n{"ok"',
      ":1}\n",
    ]);
    expect(events).toEqual(['oversized:25:{"id":', 'line:{"ok":1}']);
    expect(splitter.done).toBe(false);
  });

  test("stop: the first oversized line stops at once, before its end, and nothing after it is delivered", () => {
    const { events, splitter } = collect({ maxLineBytes: 8, onOverflow: "stop", headBytes: 3 }, [
      "ok\n0123",
      "456789",
      "abc\nlater\n",
    ]);
    expect(events).toEqual(["line:ok", "oversized:10:012"]);
    expect(splitter.done).toBe(true);
  });

  test("reset drops a partial line", () => {
    const { events, splitter } = collect({ maxLineBytes: 0, onOverflow: "discard" }, ["half"]);
    splitter.reset();
    splitter.push(Buffer.from("whole\n"));
    expect(events).toEqual(["line:whole"]);
  });
});
