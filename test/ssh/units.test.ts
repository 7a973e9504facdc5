import { expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitFor } from "../helpers/wait.ts";
import { tempDir } from "../helpers/harness.ts";
import { LocalRoot } from "../../src/ssh/localroot.ts";
import { encodeBytes } from "../../src/ssh/channel.ts";
import { masterStartError } from "../../src/ssh/master.ts";
import { parseJsonEnvironment, parseLegacyEnvironment, recoverSessionEnv } from "../../src/ssh/recovery.ts";

test("master stderr maps to a fixed message or only the status", () => {
  const prompt = masterStartError(
    "debug1: x\nssh_askpass: exec(/usr/bin/ssh-askpass): No such file\n/home/u/.ssh/id_secret",
    255,
  );
  expect(prompt.message).toBe(
    "SSH authentication requires an interactive system prompt, but no usable user session environment was available",
  );
  const other = masterStartError("Permission denied (publickey) /home/u/.ssh/id_secret", 255);
  expect(other.message).toBe("SSH master exited with status 255");
  expect(masterStartError("sign_and_send_pubkey: signing failed\nagent refused operation", 255).message).toContain(
    "interactive",
  );
});

test("recovery parsers keep only the eight names and never evaluate values", () => {
  expect(parseJsonEnvironment('{"DISPLAY":":0","PATH":"/evil","SSH_AUTH_SOCK":"","LD_PRELOAD":"x"}')).toEqual({
    DISPLAY: ":0",
  });
  expect(
    parseLegacyEnvironment(
      "DISPLAY=:1\nPATH=/evil\nSSH_AUTH_SOCK='/run/a b'\nXAUTHORITY=$'\\x41'\nWAYLAND_DISPLAY=$(touch /tmp/x)y z",
    ),
  ).toEqual({
    DISPLAY: ":1",
    SSH_AUTH_SOCK: "/run/a b",
  });
});

test("recovery fills only missing values, keeps inherited ones, and never touches process.env", async () => {
  using d = tempDir();
  const bin = join(d.path, "bin");
  const runtime = join(d.path, "run");
  mkdirSync(bin);
  mkdirSync(runtime);
  writeFileSync(join(bin, "loginctl"), `#!/bin/sh\necho ${runtime}\n`, { mode: 0o755 });
  writeFileSync(
    join(bin, "systemctl"),
    `#!/bin/sh\necho '{"DISPLAY":":5","SSH_AUTH_SOCK":"/recovered","PATH":"/evil","HOME":"/evil"}'\n`,
    { mode: 0o755 },
  );
  const inherited = { PATH: bin, SSH_AUTH_SOCK: "/mine", DISPLAY: "" };
  const before = { ...process.env };
  const env = await recoverSessionEnv(inherited, process.getuid!(), "linux");
  expect(env).toEqual({ PATH: bin, SSH_AUTH_SOCK: "/mine", DISPLAY: ":5" });
  expect(process.env).toEqual(before);
  writeFileSync(join(bin, "loginctl"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });
  expect(await recoverSessionEnv(inherited, process.getuid!(), "linux")).toEqual(inherited);
});

test("local root rejects traversal, absolute, protected and partial paths, and symlink escapes", () => {
  using d = tempDir();
  const root = new LocalRoot(d.path);
  for (const bad of ["", "/etc/passwd", "../x", "a/../../x", ".local-shell-mcp-ssh/spool/x", "a\0b", "x.lsm-partial"]) {
    expect(() => root.destination(bad, false)).toThrow();
  }
  writeFileSync(join(d.path, "f"), "x");
  expect(() => root.destination("f", false)).toThrow("overwrite");
  expect(root.destination("f", true).display).toBe("f");
  expect(root.source("./f").display).toBe("f");
});

test("the following hasher hashes a file while it grows and refuses a replaced file", async () => {
  const { appendFileSync, renameSync } = await import("node:fs");
  const { createHash, randomBytes } = await import("node:crypto");
  const { FollowingHasher } = await import("../../src/ssh/hashing.ts");
  using d = tempDir();
  const path = join(d.path, "partial");
  const all: Buffer[] = [];
  const follower = new FollowingHasher(path, new AbortController().signal);
  for (let i = 0; i < 20; i++) {
    const chunk = randomBytes(300_000);
    all.push(chunk);
    appendFileSync(path, chunk);
    await Bun.sleep(5);
  }
  expect(await follower.finish()).toBe(createHash("sha256").update(Buffer.concat(all)).digest("hex"));
  const second = new FollowingHasher(path, new AbortController().signal);
  // The replacement must come after the hasher opened the original: wait until a descriptor of this
  // process points at it (the first hasher has closed its own).
  const { readdirSync, readlinkSync } = await import("node:fs");
  const holds = () =>
    readdirSync("/proc/self/fd").some((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === path;
      } catch {
        return false; // closed while we looked
      }
    });
  await waitFor(holds, { what: "the second hasher to open the file" });
  writeFileSync(join(d.path, "other"), "replacement");
  renameSync(join(d.path, "other"), path);
  expect(await second.finish()).toBeNull();
});

test("encodeBytes sends text only within 3 response bytes per byte (wide characters counted)", () => {
  // the answer holds the text twice: JSON-escaped once (structuredContent) and twice (the JSON text)
  const wire = (s: string) =>
    Buffer.byteLength(JSON.stringify(s)) + Buffer.byteLength(JSON.stringify(JSON.stringify(s)));
  let asText = 0;
  for (const wide of ["é", "中", "😀"]) {
    for (const escaped of ['"', "\\", "\u001b", "\t"]) {
      for (let plain = 0; plain <= 6; plain++) {
        for (let perWide = 1; perWide <= 4; perWide++) {
          const s = `${wide}${escaped.repeat(perWide)}${"a".repeat(plain)}`.repeat(2000);
          const bytes = Buffer.from(s);
          const enc = encodeBytes(bytes);
          if (enc.encoding === "utf-8") {
            asText++;
            expect(enc.data).toBe(s);
            expect(wire(s)).toBeLessThanOrEqual(3 * bytes.length + 2 * 256 + 4);
          } else {
            expect(Buffer.from(enc.data, "base64")).toEqual(bytes);
          }
        }
      }
    }
  }
  expect(asText).toBeGreaterThan(0);
  // a leading byte-order mark is data
  expect(encodeBytes(Buffer.from("\uFEFFhi"))).toEqual({ data: "\uFEFFhi", encoding: "utf-8", trimmed: 0 });
});
