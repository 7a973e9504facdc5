// Builds (or fetches from the build cache) the static tmux produced by
// native/tmux/build.sh and checks that it is a static ELF, reports the pinned
// version, runs a session without any inherited environment, can attach a
// client using only its compiled-in terminfo fallbacks, and allocates with
// mimalloc (a flood of output costs the server no page-fault storm).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { waitFor } from "../helpers/wait.ts";

const ROOT = resolve(import.meta.dir, "../..");
const BUILD_SCRIPT = join(ROOT, "native/tmux/build.sh");
const PT_DYNAMIC = 2;
const PT_INTERP = 3;

let dir = "";
let bin = "";
const sockets: string[] = [];

function run(argv: string[], env: Record<string, string> = {}, timeoutMs = 10_000) {
  const r = Bun.spawnSync(argv, { env, stdout: "pipe", stderr: "pipe", timeout: timeoutMs });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

/** tmux on a private socket with an empty environment except TERM (no PATH, HOME, TERMINFO...). */
function tmux(sock: string, args: string[]) {
  return run(["/usr/bin/env", "-i", "TERM=xterm-256color", bin, "-S", sock, "-f", "/dev/null", ...args]);
}

/**
 * The shell every test pane runs: a known bash without rc files. Without a command tmux would start
 * the user's login shell with its rc files, whose start-up (a slow version manager, a prompt that
 * eats input) is not ours to wait for.
 */
const PANE_SHELL = "/bin/bash --norc --noprofile";

/** Program header types of an ELF64 little-endian file. */
function programHeaderTypes(bytes: Uint8Array): number[] {
  expect(Array.from(bytes.subarray(0, 4))).toEqual([0x7f, 0x45, 0x4c, 0x46]); // \x7fELF
  expect(bytes[4]).toBe(2); // ELFCLASS64
  expect(bytes[5]).toBe(1); // little endian
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const phoff = Number(view.getBigUint64(0x20, true));
  const phentsize = view.getUint16(0x36, true);
  const phnum = view.getUint16(0x38, true);
  expect(phnum).toBeGreaterThan(0);
  expect(phoff + phnum * phentsize).toBeLessThanOrEqual(bytes.byteLength);
  const types: number[] = [];
  for (let i = 0; i < phnum; i++) types.push(view.getUint32(phoff + i * phentsize, true));
  return types;
}

/** Can this process make a private mount namespace (needed to hide the host's terminfo)? */
const canHideTerminfo = (() => {
  if (process.getuid?.() !== 0) return false;
  try {
    const r = Bun.spawnSync(
      ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs lsm-probe /usr/share/terminfo"],
      { stdout: "ignore", stderr: "ignore", timeout: 10_000 },
    );
    return r.exitCode === 0;
  } catch {
    return false;
  }
})();
if (!canHideTerminfo) {
  console.warn(
    "skip (needs root): the terminfo-fallback test hides the host's terminfo in a private mount namespace; " +
      "not available here",
  );
}

let build: ReturnType<typeof run>;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "lsm-tmux-test-"));
  bin = join(dir, "tmux");
  // Every test uses the binary, so it is built here rather than by the first test: any test runs alone.
  build = run([BUILD_SCRIPT, bin], { ...process.env } as Record<string, string>, 590_000);
  if (build.code !== 0) throw new Error(`build.sh exited ${build.code}\n${build.err}`);
}, 600_000);

afterAll(() => {
  for (const sock of sockets) if (existsSync(sock)) tmux(sock, ["kill-server"]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("native/tmux/build.sh", () => {
  test("builds (or reuses the cached) static tmux into OUT_FILE", () => {
    expect(build.code).toBe(0);
    expect(build.err).toContain("tmux 3.5a static");
    const st = statSync(bin);
    expect(st.isFile()).toBe(true);
    expect(st.mode & 0o777).toBe(0o755);
    expect(st.size).toBeGreaterThan(500_000);
    expect(st.size).toBeLessThan(4_000_000);
  }, 600_000);

  test("is a static ELF: no PT_INTERP, no PT_DYNAMIC", () => {
    const types = programHeaderTypes(new Uint8Array(readFileSync(bin)));
    expect(types).not.toContain(PT_INTERP);
    expect(types).not.toContain(PT_DYNAMIC);
  });

  test("-V reports the pinned version", () => {
    const r = run(["/usr/bin/env", "-i", bin, "-V"]);
    expect(r.code).toBe(0);
    expect(r.out.trim()).toBe("tmux 3.5a");
  });

  test("smoke: detached session with env -i, send-keys, capture-pane", async () => {
    const sock = join(dir, "smoke.sock");
    sockets.push(sock);
    const started = tmux(sock, ["new-session", "-d", "-s", "smoke", "-x", "80", "-y", "24", PANE_SHELL]);
    expect(started.err).toBe("");
    expect(started.code).toBe(0);
    expect(tmux(sock, ["send-keys", "-t", "smoke", "echo static-ok", "Enter"]).code).toBe(0);
    const pane = await waitFor(
      () => {
        const c = tmux(sock, ["capture-pane", "-p", "-t", "smoke"]);
        return c.out.split("\n").some((l) => l.trim() === "static-ok") ? c.out : undefined;
      },
      { what: "static-ok in the pane" },
    );
    expect(pane).toContain("echo static-ok");
    expect(tmux(sock, ["kill-server"]).code).toBe(0);
  });

  test("carries compiled-in terminfo fallbacks", () => {
    // The fallback table holds each entry's full name line from ncurses' terminfo.src.
    const text = new TextDecoder("latin1").decode(readFileSync(bin));
    for (const name of ["tmux-256color|", "screen-256color|", "xterm-256color|", "vt100|"]) {
      expect(text).toContain(name);
    }
  });

  test("allocates with mimalloc: a flood of output does not churn the server's memory mappings", async () => {
    // musl's allocator returns freed pages to the kernel at once, so every line tmux stores and
    // drops maps and faults memory in again: 10,000–26,000 minor faults per 2 MB measured. mimalloc
    // keeps them for reuse: tens once warm. A count of faults, not a time, so load does not matter.
    const sock = join(dir, "flood.sock");
    sockets.push(sock);
    const shell = `${PANE_SHELL} -i`;
    expect(
      tmux(sock, ["set-option", "-g", "history-limit", "10000", ";", "new-session", "-d", "-s", "f", shell]).code,
    ).toBe(0);
    const pid = Number(tmux(sock, ["display-message", "-p", "#{pid}"]).out.trim());
    const minorFaults = () => {
      const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[7]);
    };
    const flood = (tag: string) => {
      const line = `yes | head -c 2000000; ${bin} -S ${sock} wait-for -S ${tag}`;
      expect(tmux(sock, ["send-keys", "-t", "f", "-l", "--", line, ";", "send-keys", "-t", "f", "Enter"]).code).toBe(0);
      const w = run(["/usr/bin/env", "-i", bin, "-S", sock, "wait-for", tag], {}, 60_000);
      expect(w.code).toBe(0);
    };
    flood("warm"); // the first flood grows the heap to its working size
    const before = minorFaults();
    flood("measured");
    const faults = minorFaults() - before;
    console.log(`tmux server: ${faults} minor page faults for 2 MB of output`);
    expect(faults).toBeLessThan(1_000);
    // And the allocator is the pinned one: its own messages are in the binary.
    const text = new TextDecoder("latin1").decode(readFileSync(bin));
    expect(text.includes("mimalloc: ")).toBe(true);
  }, 120_000);

  test.skipIf(!canHideTerminfo)(
    "attaches a TERM=xterm-256color client with every terminfo directory hidden",
    async () => {
      // Inside a private mount namespace the host's terminfo directories are
      // replaced by empty tmpfs mounts, so only the compiled-in fallbacks can
      // describe the client's terminal. An outer tmux provides the pty in
      // which the inner client runs; the outer server keeps the namespace.
      const outer = join(dir, "outer.sock");
      const inner = join(dir, "inner.sock");
      sockets.push(inner, outer);
      const q = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
      const innerCmd =
        `env -i TERM=xterm-256color ${q(bin)} -S ${q(inner)} -f /dev/null new-session -s inner -x 78 -y ` +
        `20 ${q(PANE_SHELL)}`;
      const script = [
        "set -e",
        "for d in /usr/share/terminfo /lib/terminfo /etc/terminfo; do [ -d $d ] && mount -t tmpfs lsm-empty $d; done",
        // prove the host database is really gone before relying on it being gone
        "for f in /usr/share/terminfo/x/xterm-256color /lib/terminfo/x/xterm-256color; do [ ! -e $f ]; done",
        `exec env -i TERM=xterm-256color ${q(bin)} -S ${q(outer)} -f /dev/null new-session -d -s outer -x 100 -y 30 ${q(
          `${innerCmd}; echo inner-exited-$?; sleep 60`,
        )}`,
      ].join("\n");
      const r = run(["unshare", "-m", "--propagation", "private", "sh", "-c", script]);
      expect(r.err).toBe("");
      expect(r.code).toBe(0);

      const termname = await waitFor(
        () => {
          const c = tmux(inner, ["list-clients", "-F", "#{client_termname}"]);
          return c.code === 0 && c.out.trim() !== "" ? c.out.trim() : undefined;
        },
        { what: "inner client to attach" },
      );
      expect(termname).toBe("xterm-256color");

      expect(tmux(inner, ["send-keys", "-t", "inner", "echo fallback-ok", "Enter"]).code).toBe(0);
      // The outer pane shows what the attached client drew with the fallback entry.
      const screen = await waitFor(
        () => {
          const c = tmux(outer, ["capture-pane", "-p", "-t", "outer"]);
          return c.out.split("\n").some((l) => l.trim() === "fallback-ok") ? c.out : undefined;
        },
        { what: "fallback-ok drawn by the attached client" },
      );
      expect(screen).not.toContain("missing or unsuitable terminal");
      expect(screen).not.toContain("inner-exited");

      tmux(inner, ["kill-server"]);
      tmux(outer, ["kill-server"]);
    },
    30_000,
  );
});
