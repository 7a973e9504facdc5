/**
 * Item 9 of issue 9: arguments the kernel or the parser would choke on are refused as
 * `invalid_arguments` with a message the model can act on, instead of `spawn_failed`,
 * `internal_error`, or running with a surprising meaning.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { openRawStdio, toolError, type RawStdio } from "../helpers/raw-stdio.ts";

let raw: RawStdio & { workspace: string };
let sid: string;

beforeAll(async () => {
  raw = await openRawStdio();
  const started = await raw.call("session_start", { workdir: "." });
  sid = (started.result as { structuredContent: { session_id: string } }).structuredContent.session_id;
});

afterAll(() => raw?.close());

test("a NUL byte in the command is an argument error that says so", async () => {
  const e = toolError(await raw.call("bash", { session_id: sid, command: "echo a\u0000b" }));
  expect(e.code).toBe("invalid_arguments");
  expect(e.text).toContain("NUL");
});

test("a 5 MB env value is an argument error naming the limit", async () => {
  const e = toolError(
    await raw.call("bash", { session_id: sid, command: "true", env: { BIG: "x".repeat(5_000_000) } }),
  );
  expect(e.code).toBe("invalid_arguments");
  expect(e.text).toContain("env");
  expect(e.text).toMatch(/bytes/);
});

test("many medium env values that add up past the total limit are refused too", async () => {
  const env: Record<string, string> = {};
  for (let i = 0; i < 20; i++) env[`V${i}`] = "y".repeat(100_000);
  const e = toolError(await raw.call("bash", { session_id: sid, command: "true", env }));
  expect(e.code).toBe("invalid_arguments");
  expect(e.text).toContain("env");
});

test("a command longer than the kernel's argument limit is an argument error, not spawn_failed", async () => {
  const e = toolError(await raw.call("bash", { session_id: sid, command: `: ${"z".repeat(200_000)}` }));
  expect(e.code).toBe("invalid_arguments");
  expect(e.text).toContain("write_file");
});

test("a negative timeout is refused instead of running", async () => {
  const marker = `${raw.workspace}/ran-with-negative-timeout`;
  const e = toolError(await raw.call("bash", { session_id: sid, command: `touch ${marker}`, timeout_s: -5 }));
  expect(e.code).toBe("invalid_arguments");
  expect(e.text).toContain("timeout_s");
  expect(await Bun.file(marker).exists()).toBe(false);
});

test(
  "200,000-deep nested arguments are refused with the " + "documented depth cap, and the server keeps serving",
  async () => {
    const depth = 200_000;
    const id = raw.nextId();
    const args = `{"session_id":"${sid}","command":"true","env":${"[".repeat(depth)}${"]".repeat(depth)}}`;
    await raw.sendLine(
      `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"bash","arguments":${args}}}`,
    );
    const e = toolError(await raw.answer(id));
    expect(e.code).toBe("invalid_arguments");
    expect(e.text).toMatch(/nested deeper than \d+ levels/);
    // Still serving, and ordinary work still runs.
    const ok = (await raw.call("bash", { session_id: sid, command: "echo still-here" })).result as {
      structuredContent?: { result: { stdout: string } };
    };
    expect(ok.structuredContent?.result.stdout).toBe("still-here\n");
  },
);

test("valid values at the edges still run", async () => {
  const ok = (
    await raw.call("bash", {
      session_id: sid,
      command: 'printf %s "$E" | wc -c',
      timeout_s: 0,
      env: { E: "e".repeat(100_000) },
    })
  ).result as {
    structuredContent?: { result: { stdout: string } };
  };
  expect(ok.structuredContent?.result.stdout.trim()).toBe("100000");
});
