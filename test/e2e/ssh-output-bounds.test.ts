/**
 * Output stays bounded on the wire: 10 MB of NULs through `exec` and `read_file_range` come back with
 * the official SDK client still connected (its stdio buffer is 10 MiB) and every response within ~3
 * bytes per captured byte, whatever the bytes are (text, quotes, control bytes, random binary).
 * Throwaway sshd (root needed).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { keyOf, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";

const isRoot = process.getuid!() === 0;
const LIMIT = 1_048_576;

let sshd: Sshd;
let root: TempDir;
let s: SshClient;
let k: { session_id: string; session_key: string };

/** Bytes of the JSON-RPC response line carrying `result` (what the client has to buffer). */
function responseBytes(result: unknown): number {
  return Buffer.byteLength(JSON.stringify({ jsonrpc: "2.0", id: 1, result }));
}

const figures: string[] = [];

async function execRatio(label: string, command: string): Promise<{ ratio: number; stdout: any; bytes: number }> {
  const raw = await s.raw("exec", { ...k, command });
  const env = raw.structuredContent as any;
  expect(env.ok).toBe(true);
  const r = env.result;
  const captured = r.stdout.captured_bytes + r.stderr.captured_bytes;
  const bytes = responseBytes(raw);
  const ratio = bytes / captured;
  figures.push(`${label}: ${captured} captured bytes -> ${bytes} response bytes (${ratio.toFixed(2)} per byte, ${r.stdout.encoding})`);
  return { ratio, stdout: r.stdout, bytes };
}

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-bounds-");
  await $`head -c 10000000 /dev/zero > ${sshd.home}/zeros.bin && chown ${sshd.user}: ${sshd.home}/zeros.bin`.quiet();
  s = await startSshClient({ sshd, localRoot: root.path });
  k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
}, 60_000);

afterAll(async () => {
  if (figures.length) console.log(`wire figures:\n  ${figures.join("\n  ")}`);
  await s?.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

// Needs root: the sshd fixture adds users.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("responses stay within ~3x the captured bytes", () => {
  test("10 MB of NULs on stdout and stderr: base64, client still connected", async () => {
    const r = await execRatio("NUL bytes (stdout+stderr)", "head -c 10000000 /dev/zero; head -c 10000000 /dev/zero >&2");
    expect(r.stdout).toMatchObject({ encoding: "base64", captured_bytes: LIMIT, total_bytes: 10_000_000, truncated: true });
    expect(Buffer.from(r.stdout.data, "base64").every((b: number) => b === 0)).toBe(true);
    expect(r.ratio).toBeLessThanOrEqual(3);
    expect(r.bytes).toBeLessThan(10 * 1024 * 1024);
    expect((await s.ok("exec", { ...k, command: "echo still-here" })).stdout.data).toBe("still-here\n");
  }, 60_000);

  test("read_file_range of a 10 MB NUL file at the output limit", async () => {
    const raw = await s.raw("read_file_range", { ...k, remote_path: `${sshd.home}/zeros.bin`, max_bytes: LIMIT });
    const r = (raw.structuredContent as any).result;
    expect(r).toMatchObject({ encoding: "base64", bytes_read: LIMIT, eof: false, size: 10_000_000 });
    const ratio = responseBytes(raw) / LIMIT;
    figures.push(`read_file_range NULs: ${LIMIT} bytes -> ${responseBytes(raw)} response bytes (${ratio.toFixed(2)} per byte)`);
    expect(ratio).toBeLessThanOrEqual(3);
    expect((await s.ok("session_list")).count).toBe(1);
  }, 60_000);

  test("plain text stays text; control bytes, escape-heavy text and random bytes become base64", async () => {
    const text = await execRatio("text", "head -c 3000000 /dev/zero | tr '\\0' a");
    expect(text.stdout.encoding).toBe("utf-8");
    const lines = await execRatio("text lines", "seq 1 400000");
    expect(lines.stdout.encoding).toBe("utf-8");
    const ctl = await execRatio("control bytes (\\001)", "head -c 3000000 /dev/zero | tr '\\0' '\\001'");
    expect(ctl.stdout.encoding).toBe("base64");
    const quotes = await execRatio("quotes", `head -c 3000000 /dev/zero | tr '\\0' '"'`);
    expect(quotes.stdout.encoding).toBe("base64");
    const random = await execRatio("random binary", "head -c 3000000 /dev/urandom");
    expect(random.stdout.encoding).toBe("base64");
    // ESC is kept as text (colour codes), as long as escaping keeps within the budget
    const ansi = await execRatio("ANSI colours", `for i in $(seq 1 20000); do printf '\\033[1mline %s of a coloured listing\\033[0m\\n' "$i"; done`);
    expect(ansi.stdout.encoding).toBe("utf-8");
    expect(ansi.stdout.data).toContain("\u001b[1mline 7 of");
    for (const r of [text, lines, ctl, quotes, random, ansi]) expect(r.ratio).toBeLessThanOrEqual(3);
  }, 60_000);
});
