/**
 * Output stays bounded on the wire: 10 MB of NULs through `exec` and `read_file_range` come back with
 * the official SDK client still connected (its stdio buffer is 10 MiB) and every response within ~3
 * bytes per captured byte, whatever the bytes are (text, quotes, control bytes, random binary, wide
 * characters mixed with escapes). At the largest `--max-output-bytes`, 100 MB of NULs and of text on
 * both streams still leave the client connected. A leading byte-order mark arrives byte-exact.
 * Throwaway sshd (root needed); the flag's bound needs no sshd.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { binary, needsRoot, serverEnv, tempDir, type TempDir } from "../helpers/harness.ts";
import { keyOf, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";

const isRoot = process.getuid!() === 0;
const LIMIT = 1_048_576;
/** The largest `--max-output-bytes` the server accepts (src/ssh/settings.ts). */
const MAX_LIMIT = 1_572_864;
/** The official SDK client's stdio buffer: a longer response line closes its connection. */
const SDK_BUFFER = 10 * 1024 * 1024;

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
  figures.push(
    `${label}: ${captured} captured bytes -> ${bytes} response bytes (${ratio.toFixed(2)} per ` +
      `byte, ${r.stdout.encoding})`,
  );
  return { ratio, stdout: r.stdout, bytes };
}

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-bounds-");
  await $`head -c 10000000 /dev/zero > ${sshd.home}/zeros.bin && chown ${sshd.user}: ${sshd.home}/zeros.bin`.quiet();
  await $`printf '\357\273\277bom-file\n' > ${sshd.home}/bom.txt && chown ${sshd.user}: ${sshd.home}/bom.txt`.quiet();
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
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))(
  "responses stay within ~3x the captured bytes",
  () => {
    test("10 MB of NULs on stdout and stderr: base64, client still connected", async () => {
      const r = await execRatio(
        "NUL bytes (stdout+stderr)",
        "head -c 10000000 /dev/zero; head -c 10000000 /dev/zero >&2",
      );
      expect(r.stdout).toMatchObject({
        encoding: "base64",
        captured_bytes: LIMIT,
        total_bytes: 10_000_000,
        truncated: true,
      });
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
      figures.push(
        `read_file_range NULs: ${LIMIT} bytes -> ${responseBytes(raw)} response bytes (${ratio.toFixed(2)} per byte)`,
      );
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
      const ansi = await execRatio(
        "ANSI colours",
        `for i in $(seq 1 20000); do printf '\\033[1mline %s of a coloured listing\\033[0m\\n' "$i"; done`,
      );
      expect(ansi.stdout.encoding).toBe("utf-8");
      expect(ansi.stdout.data).toContain("\u001b[1mline 7 of");
      for (const r of [text, lines, ctl, quotes, random, ansi]) expect(r.ratio).toBeLessThanOrEqual(3);
    }, 60_000);
  },
);

describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("bytes arrive exactly", () => {
  test("a leading UTF-8 byte-order mark survives in exec output and read_file_range", async () => {
    const r = await s.ok("exec", { ...k, command: "printf '\\357\\273\\277hi'; printf '\\357\\273\\277err' >&2" });
    expect(r.stdout).toMatchObject({ encoding: "utf-8", data: "\uFEFFhi", captured_bytes: 5, total_bytes: 5 });
    expect(r.stderr).toMatchObject({ encoding: "utf-8", data: "\uFEFFerr", captured_bytes: 6 });
    const f = await s.ok("read_file_range", { ...k, remote_path: `${sshd.home}/bom.txt` });
    expect(f).toMatchObject({ bytes_read: 12, encoding: "utf-8", data: "\uFEFFbom-file\n" });
    expect(Buffer.from(f.data, "utf8")).toEqual(Buffer.from("\xEF\xBB\xBFbom-file\n", "latin1"));
  }, 60_000);

  test("wide characters mixed with quotes or ESC stay within 3 response bytes per byte", async () => {
    // a 4-byte emoji counted per UTF-16 unit as 2 response bytes (it costs 8) once let these pass as
    // text at 3.7 (three quotes) and 4.2 (one ESC) response bytes per byte
    const repeat = (unit: string) => `i=0; while [ $i -lt 20000 ]; do printf '${unit}'; i=$((i+1)); done`;
    const quotes = await execRatio("emoji + 3 quotes", repeat('\\360\\237\\230\\200"""'));
    const esc = await execRatio("emoji + ESC", repeat("\\360\\237\\230\\200\\033"));
    for (const r of [quotes, esc]) expect(r.ratio).toBeLessThanOrEqual(3);
  }, 60_000);
});

const needsSshd = needsRoot("the throwaway sshd creates system users and sudoers rules");

describe.skipIf(needsSshd)("at the largest --max-output-bytes", () => {
  test("100 MB of NULs and then of text on both streams: bounded answers, client connected, serving", async () => {
    const args = ["--max-output-bytes", String(MAX_LIMIT), "--command-timeout", "300"];
    const big = await startSshClient({ sshd, localRoot: root.path, args });
    try {
      const bk = keyOf(await big.ok("connect", { ssh_alias: sshd.alias }));
      const cases = [
        ["NULs", "head -c 100000000 /dev/zero & head -c 100000000 /dev/zero >&2; wait", "base64"],
        [
          "text",
          "head -c 100000000 /dev/zero | tr '\\0' a & head -c 100000000 /dev/zero | tr '\\0' b >&2; wait",
          "utf-8",
        ],
      ] as const;
      for (const [label, command, encoding] of cases) {
        const raw = await big.raw("exec", { ...bk, command }, undefined);
        const env = raw.structuredContent as any;
        expect(env.ok).toBe(true);
        for (const stream of [env.result.stdout, env.result.stderr]) {
          const full = { encoding, captured_bytes: MAX_LIMIT, total_bytes: 100_000_000, truncated: true };
          expect(stream).toMatchObject(full);
        }
        const bytes = responseBytes(raw);
        figures.push(`max-output-bytes ${MAX_LIMIT}, 100 MB of ${label} per stream -> ${bytes} response bytes`);
        expect(bytes).toBeLessThan(SDK_BUFFER);
        expect((await big.ok("exec", { ...bk, command: "echo still-here" })).stdout.data).toBe("still-here\n");
      }
      expect((await big.ok("session_list")).count).toBe(1);
      expect(big.transport.pid).toBeGreaterThan(0);
    } finally {
      await big.close();
    }
  }, 300_000);
});

describe("the --max-output-bytes flag", () => {
  test("refuses more than its maximum (exit 2) and --help names the bound and why", async () => {
    const tmp = tempDir("lsm-ssh-flag-");
    try {
      const run = (args: string[]) => {
        const r = Bun.spawnSync([binary(), "ssh", "--local-root", tmp.path, ...args], {
          env: serverEnv({}),
          stdin: "ignore",
          stdout: "pipe",
          stderr: "pipe",
          timeout: 30_000,
        });
        return { code: r.exitCode, err: r.stderr.toString(), out: r.stdout.toString() };
      };
      const over = run(["--max-output-bytes", String(MAX_LIMIT + 1)]);
      expect(over.code).toBe(2);
      expect(over.err).toContain(`--max-output-bytes must be an integer from 1024 to ${MAX_LIMIT}`);
      expect(run(["--max-output-bytes", "67108864"]).code).toBe(2);
      const help = run(["--help"]);
      expect(help.out + help.err).toContain("1024..1572864");
      expect(help.out + help.err).toContain("10 MiB");
    } finally {
      tmp[Symbol.dispose]();
    }
  }, 60_000);
});
