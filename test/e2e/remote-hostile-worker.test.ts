/**
 * A hostile worker cannot harm the controller or another worker (issue 23): a fake worker
 * (test/helpers/fake-worker.ts) enrolls like a real one, then answers the controller's calls with
 * the attacks. Everything goes through the compiled binary; the controller's memory is read from
 * /proc (VmHWM, the peak, reset before each attack).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { errorCode, tempDir, type TempDir } from "../helpers/harness.ts";
import {
  binaryFrame,
  connectFake,
  currentRss,
  enrollFake,
  type FakeWorker,
  peakRss,
  resetPeakRss,
  type WireCall,
} from "../helpers/fake-worker.ts";
import { rawHeader, serveArchive, smallTar, zeroBomb } from "../helpers/hostile-archives.ts";
import { type Controller, invite, startController } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const MiB = 1024 * 1024;
const mib = (bytes: number) => (bytes / MiB).toFixed(1);
/** The bound the issue sets on what any archive or frame from a worker may cost the controller. */
const RSS_BOUND = 64 * MiB;
const CAPS = ["shell", "persistent_shell", "files", "search"];
const sha = (b: Uint8Array) => new Bun.CryptoHasher("sha256").update(b).digest("hex");

let dir: TempDir;
let ctl: Controller;
let ws: string;
/** The controller's own local session: the destination of copies, and a template orientation. */
let local: { session_id: string } & Record<string, unknown>;

beforeAll(async () => {
  dir = tempDir("lsm-hostile-");
  ws = join(dir.path, "ws");
  mkdirSync(ws);
  // A loopback base_url: the transfer gateway needs one, and auth_mode=none allows no other.
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = probe.port;
  probe.stop(true);
  const env = {
    LOCAL_SHELL_MCP_MAX_TRANSFER_UNPACKED_BYTES: String(4 * 1024 ** 3),
    LOCAL_SHELL_MCP_BASE_URL: `http://127.0.0.1:${port}`,
  };
  ctl = await startController({ state: join(dir.path, "state"), workspace: ws, port, env });
  local = await ctl.mcp.ok("session_start", { workdir: "." });
}, 60_000);

afterAll(async () => {
  await ctl?.dispose();
  dir?.[Symbol.dispose]();
});

/** Enrolls and connects a fake worker named `name`. */
async function fake(name: string, capabilities = CAPS): Promise<FakeWorker> {
  const { code } = await invite(ctl.mcp, { name });
  const wd = join(dir.path, `${name}-wd`);
  mkdirSync(wd, { recursive: true });
  const token = await enrollFake(ctl.url, code, name, wd, capabilities);
  return connectFake(ctl.url, name, token, { workdir: wd, capabilities });
}

/** The orientation a worker answers session_start with: the controller's own, under the worker's id. */
function orientation(workerSid: string, workdir: string): Record<string, unknown> {
  return { ...local, session_id: workerSid, workdir };
}

/** A remote session on `w`, whose worker-side id is `workerSid`. */
async function remoteSession(w: FakeWorker, workerSid: string): Promise<string> {
  const before = w.answer;
  w.answer = (c) =>
    c.op === "tool" && c.args.name === "session_start"
      ? { ok: true, data: { structured: orientation(workerSid, "/fake/wd") } }
      : before(c);
  const r = await ctl.mcp.ok<{ session_id: string }>("session_start", {
    target: "remote",
    machine: w.name,
    workdir: "/fake/wd",
  });
  w.answer = before;
  return r.session_id;
}

/** Runs `attack` and returns how far the controller's peak RSS rose above its RSS before it. */
async function rssGrowth(attack: () => Promise<void>): Promise<number> {
  const pid = ctl.proc.pid;
  Bun.gc(true);
  const reset = resetPeakRss(pid);
  const before = currentRss(pid);
  // Sampled too: where the peak cannot be reset, the samples are the measure.
  let sampled = before;
  const sampler = setInterval(() => (sampled = Math.max(sampled, currentRss(pid))), 5);
  try {
    await attack();
  } finally {
    clearInterval(sampler);
  }
  return Math.max(sampled, reset ? peakRss(pid) : 0) - before;
}

/** Whatever the copy left in the controller's workspace besides what was there. */
const leftovers = () => readdirSync(ws).filter((n) => n !== "dst");

describe("hostile archives", () => {
  let w: FakeWorker;
  let sid: string;
  beforeAll(async () => {
    w = await fake("tar-bomber");
    sid = await remoteSession(w, "wsess-tar");
  }, 60_000);

  /** The error code of a copy of `archive` from the worker (its message is logged). */
  const copyFrom = async (archive: Uint8Array) => {
    w.answer = serveArchive(archive);
    const r = await ctl.mcp.call("session_copy", {
      src_session_id: sid,
      src_path: "tree",
      dst_session_id: local.session_id,
      dst_path: "dst",
    });
    if (!r.isError) return "accepted";
    console.log(`  refused: ${(r.content[0] as { text: string }).text.slice(0, 200)}`);
    return errorCode(r);
  };

  test("a small gzip whose headers declare gigabytes is refused at the header, within 64 MiB of RSS", async () => {
    const cases: Array<[string, Uint8Array, string]> = [
      // The attack of the issue: a 3 MB gzip of a pax header declaring 3 GiB, and the 3 GiB: the
      // declared size was allocated whole (60 → 3,186 MiB RSS).
      [
        "pax header of 3 GiB",
        zeroBomb(rawHeader("PaxHeader", "x", 3 * 1024 ** 3), 3 * 1024 ** 3 + 512),
        "archive_invalid",
      ],
      // A member within the unpacked limit (4 GiB here) that carries only 48 MiB of what it declares.
      ["member of 3 GiB cut short", zeroBomb(rawHeader("big.bin", "0", 3 * 1024 ** 3), 48 * MiB), "archive_invalid"],
      // More than max_transfer_unpacked_bytes declared: refused at the header, nothing written.
      [
        "member of 7 GiB above the limit",
        zeroBomb(rawHeader("big.bin", "0", 7 * 1024 ** 3), 48 * MiB),
        "transfer_too_large",
      ],
    ];
    for (const [what, bomb, code] of cases) {
      expect(bomb.length).toBeLessThan(4 * MiB);
      let got = "";
      const growth = await rssGrowth(async () => {
        got = await copyFrom(bomb);
      });
      console.log(
        `${what}: ${(bomb.length / MiB).toFixed(2)} MiB gzip → ${got}, controller peak RSS +${mib(growth)} MiB`,
      );
      expect({ what, got }).toEqual({ what, got: code });
      expect(growth).toBeLessThan(RSS_BOUND);
      expect(leftovers()).toEqual([]);
      expect(existsSync(join(ws, "dst"))).toBe(false);
    }
  }, 300_000);

  test("path tricks and link members are refused and nothing lands outside the destination", async () => {
    for (const name of ["../escape.txt", "/etc/lsm-escape", "a/../../escape.txt", "./", "a//b"]) {
      const got = await copyFrom(
        gzipSync(
          smallTar([
            { name: "a", type: "5" },
            { name, body: "pwned" },
          ]),
        ),
      );
      expect({ name, got }).toEqual({ name, got: "archive_invalid" });
    }
    for (const type of ["1", "2", "3", "6"]) {
      expect(await copyFrom(gzipSync(smallTar([{ name: "l", type }])))).toBe("archive_invalid");
    }
    expect(existsSync(join(dir.path, "escape.txt"))).toBe(false);
    expect(existsSync("/etc/lsm-escape")).toBe(false);
    expect(leftovers()).toEqual([]);
    // The same worker's honest archive still lands: the refusals were about the archives.
    w.answer = serveArchive(
      gzipSync(
        smallTar([
          { name: "d", type: "5" },
          { name: "d/f.txt", body: "fine" },
        ]),
      ),
    );
    const good = await ctl.mcp.ok<{ result: { entries: number } }>("session_copy", {
      src_session_id: sid,
      src_path: "tree",
      dst_session_id: local.session_id,
      dst_path: "dst",
    });
    expect(good.result.entries).toBe(2);
    expect(await Bun.file(join(ws, "dst", "d", "f.txt")).text()).toBe("fine");
  }, 120_000);
});

type Structured = Record<string, unknown> & { result: Record<string, unknown> };
const toolOf = (c: WireCall) => (c.op === "tool" ? (c.args.name as string) : c.op);
const argsOf = (c: WireCall) => (c.args.args ?? {}) as Record<string, unknown>;
const ok = (structured: unknown) => ({ ok: true as const, data: { structured } });
const refuse = (code: string) => ({ ok: false as const, code, message: `the fake worker refuses (${code})` });

describe("ids a worker names", () => {
  test("no answer re-routes a call to another worker's shell or job, or to this machine's shell", async () => {
    const victim = await fake("victim");
    const attacker = await fake("attacker");
    const sv = await remoteSession(victim, "wsess-victim");
    const sa = await remoteSession(attacker, "wsess-attacker");
    // Real answers of this controller serve as the templates of the workers' answers.
    const pty = await ctl.mcp.ok<Structured>("bash", { session_id: local.session_id, command: "sleep 600", pty: true });
    const localShell = pty.result.shell_id as string;
    const plain = await ctl.mcp.ok<Structured>("bash", { session_id: local.session_id, command: "echo hi" });
    const listed = (
      await ctl.mcp.ok<{ shells: Array<Record<string, unknown>> }>("list_persistent_shells", {
        session_id: local.session_id,
      })
    ).shells[0]!;
    const sent = (c: WireCall) =>
      ok({
        shell_id: argsOf(c).shell_id,
        sent_bytes: String(argsOf(c).input_text ?? "").length,
        enter: true,
        keys: [],
      });

    victim.answer = (c) => {
      if (toolOf(c) === "bash")
        return ok({ ...pty, result: { ...pty.result, shell_id: "dev", session_id: "wsess-victim" } });
      if (toolOf(c) === "send_persistent_shell_input") return sent(c);
      return refuse("job_not_found");
    };
    expect((await ctl.mcp.ok<Structured>("bash", { session_id: sv, command: "bash", pty: true })).result.shell_id).toBe(
      "dev",
    );

    // 1. An ordinary answer that names the victim's shell, its job and its session anywhere.
    attacker.answer = (c) => {
      if (toolOf(c) === "bash")
        return ok({
          ...plain,
          result: {
            ...plain.result,
            shell_id: "dev",
            job_id: "job-victim",
            nested: { shell_id: "dev", session_id: sv },
          },
        });
      if (toolOf(c) === "send_persistent_shell_input") return sent(c);
      return refuse("shell_not_found");
    };
    await ctl.mcp.ok("bash", { session_id: sa, command: "echo hi" });
    await ctl.mcp.ok("send_persistent_shell_input", { shell_id: "dev", input_text: "secret-1" });
    // 2. A listing that claims the victim's shell and this machine's shell.
    attacker.answer = (c) => {
      if (toolOf(c) === "list_persistent_shells")
        return ok({
          shells: [
            { ...listed, shell_id: "dev" },
            { ...listed, shell_id: localShell },
          ],
        });
      if (toolOf(c) === "send_persistent_shell_input") return sent(c);
      return refuse("shell_not_found");
    };
    await ctl.mcp.ok("list_persistent_shells", { session_id: sa });
    // Two workers now name "dev": by shell_id alone it goes nowhere; with the session it is the victim's.
    expect(await ctl.mcp.fails("send_persistent_shell_input", { shell_id: "dev", input_text: "secret-2" })).toBe(
      "shell_id_ambiguous",
    );
    await ctl.mcp.ok("send_persistent_shell_input", { session_id: sv, shell_id: "dev", input_text: "secret-3" });
    // This machine's shell stays this machine's.
    await ctl.mcp.ok("send_persistent_shell_input", { shell_id: localShell, input_text: "echo local" });
    // 3. An answer the output schema refuses teaches nothing.
    attacker.answer = (c) => (toolOf(c) === "bash" ? ok({ mode: "pty", result: { shell_id: "ghost" } }) : sent(c));
    expect(await ctl.mcp.call("bash", { session_id: sa, command: "bash", pty: true }).then((r) => r.isError)).toBe(
      true,
    );
    expect(await ctl.mcp.fails("send_persistent_shell_input", { shell_id: "ghost", input_text: "secret-4" })).toBe(
      "shell_not_found",
    );
    // 4. A job or session the attacker named is still reached through its own session only.
    await ctl.mcp.fails("job", { session_id: sv, poll: ["job-victim"] });
    expect(await ctl.mcp.fails("job", { session_id: local.session_id, poll: ["job-victim"] })).toBe("job_not_found");

    const inputs = (w: FakeWorker) => w.callsOf("send_persistent_shell_input").map((c) => argsOf(c).input_text);
    expect(inputs(attacker)).toEqual([]);
    expect(inputs(victim)).toEqual(["secret-1", "secret-3"]);
    expect(victim.callsOf("job").length).toBe(1);
    expect(attacker.callsOf("job").length).toBe(0);
    await ctl.mcp.ok("kill_persistent_shell", { shell_id: localShell });
  }, 120_000);
});

describe("frames", () => {
  test("results never asked for, other workers' calls, duplicates settle nothing; floods cost ≤ 64 MiB", async () => {
    const flooder = await fake("flooder");
    const honest = await fake("honest");
    const sf = await remoteSession(flooder, "wsess-flooder");
    const sh = await remoteSession(honest, "wsess-honest");
    const plain = await ctl.mcp.ok<Structured>("bash", { session_id: local.session_id, command: "echo hi" });
    const answer = (text: string) => ok({ ...plain, result: { ...plain.result, stdout: text } });
    honest.answer = () => undefined;
    const pending = ctl.mcp.ok<Structured>("bash", { session_id: sh, command: "echo mine" });
    const held = await waitFor(() => honest.callsOf("bash")[0], {
      timeoutMs: 20_000,
      what: "the honest worker's call",
    });
    // The flooder answers the honest worker's call id first, then floods.
    flooder.result(held.id, answer("forged\n"));
    honest.result(held.id, answer("mine\n"));
    expect((await pending).result.stdout).toBe("mine\n");
    honest.result(held.id, answer("again\n"));

    // Each attack on its own, as each frame is measured: a flood of small ones, then a near-limit
    // text frame (the default max_http_request_bytes is 16 MB), then a near-limit binary one.
    const attacks: Array<[string, () => void]> = [
      [
        "20,000 results for calls never sent",
        () => {
          for (let i = 0; i < 20_000; i++) flooder.result(`c_forged${i}`, answer("x"));
        },
      ],
      ["a 15 MB text result for a call never sent", () => flooder.result("c_big", answer("y".repeat(15 * MiB)))],
      [
        "a 15 MB binary result for a call never sent",
        () => flooder.send(binaryFrame({ type: "result", id: "c_big2", ok: true, data: {} }, new Uint8Array(15 * MiB))),
      ],
    ];
    let n = 0;
    for (const [what, attack] of attacks) {
      const growth = await rssGrowth(async () => {
        attack();
        // Frames are handled in order: this call's answer comes after all of the attack.
        flooder.answer = (c) => (toolOf(c) === "bash" ? answer(`after ${n}\n`) : undefined);
        expect((await ctl.mcp.ok<Structured>("bash", { session_id: sf, command: "echo after" })).result.stdout).toBe(
          `after ${n++}\n`,
        );
      });
      console.log(`${what}: controller peak RSS +${(growth / MiB).toFixed(1)} MiB`);
      expect({ what, below: growth < RSS_BOUND }).toEqual({ what, below: true });
    }
    expect(flooder.isOpen()).toBe(true);
    const lines = ctl.stderr().split("\n");
    expect(lines.filter((l) => l.includes("worker flooder sent a result for a call it was never sent")).length).toBe(1);
    expect(lines.filter((l) => l.includes("worker honest sent a result for a call already settled")).length).toBe(1);
  }, 180_000);

  test("malformed, oversized and out-of-order frames close the link, within 64 MiB of RSS", async () => {
    const w = await fake("framer");
    const reconnect = (hello = true) =>
      connectFake(ctl.url, w.name, w.token, { workdir: "/fake/wd", capabilities: CAPS, hello });
    const cases: Array<[string, (f: FakeWorker) => void, number, boolean]> = [
      // 15 MB of `[0,0,…]`: 7.5 million values if it were parsed.
      [
        "a frame of 7.5 million JSON values",
        (f) => f.send(`{"type":"result","id":"c_x","ok":true,"data":[${"0,".repeat(7.5 * MiB)}0]}`),
        1002,
        true,
      ],
      [
        "JSON nested 100,000 deep",
        (f) => f.send(`{"type":"result","id":"c_x","ok":true,"data":${"[".repeat(100_000)}${"]".repeat(100_000)}}`),
        1002,
        true,
      ],
      [
        "a frame above max_http_request_bytes",
        (f) => f.send(binaryFrame({ type: "result", id: "c_x", ok: true }, new Uint8Array(17 * MiB))),
        1009,
        true,
      ],
      [
        "an error code that is not a code",
        (f) =>
          f.send(
            JSON.stringify({ type: "result", id: "c_x", ok: false, error: { code: "Internal Error!", message: "x" } }),
          ),
        1002,
        true,
      ],
      [
        "a second hello",
        (f) =>
          f.send(
            JSON.stringify({
              type: "hello",
              protocol: 1,
              boot_id: "again",
              runtime: { version: "x", build_digest: "x", bundle_sha256: null },
              running: [],
              unacked: [],
            }),
          ),
        1002,
        true,
      ],
      [
        "a result before the hello",
        (f) => f.send(JSON.stringify({ type: "result", id: "c_x", ok: true })),
        1002,
        false,
      ],
      ["a binary frame whose header overruns it", (f) => f.send(new Uint8Array([0, 0, 255, 255, 123])), 1002, true],
    ];
    let link = w;
    for (const [what, attack, code, hello] of cases) {
      if (!link.isOpen() || !hello) {
        link.close();
        await link.closed;
        link = await reconnect(hello);
      }
      const current = link;
      let closed = { code: 0, reason: "" };
      const growth = await rssGrowth(async () => {
        attack(current);
        closed = await current.closed;
      });
      console.log(
        `${what}: closed ${closed.code} (${closed.reason}), controller peak RSS +${(growth / MiB).toFixed(1)} MiB`,
      );
      expect({ what, code: closed.code }).toEqual({ what, code });
      expect(growth).toBeLessThan(RSS_BOUND);
    }
    // The worker's identity survives its bad frames: an honest hello is welcomed again.
    const back = await reconnect();
    expect(back.isOpen()).toBe(true);
    back.close();
  }, 180_000);
});

describe("gateway capabilities", () => {
  test("a capability issued to one worker is refused with another worker's token, whatever it names", async () => {
    const caps = [...CAPS, "http-transfer-v1"];
    const up = await fake("gw-up", caps);
    const other = await fake("gw-other", caps);
    const s = await remoteSession(up, "wsess-gw");
    const content = crypto.getRandomValues(new Uint8Array(2 * MiB));
    up.answer = (c) => {
      if (c.op === "transfer_stat")
        return {
          ok: true,
          data: {
            path: "f.bin",
            resolved_path: "f.bin",
            kind: "file",
            size: content.length,
            mode: 0o644,
            identity: "f1",
            sha256: sha(content),
          },
        };
      if (c.op === "transfer_http_upload") return undefined; // held: the test plays the worker's part
      return refuse("unknown_operation");
    };
    const copy = ctl.mcp.call("session_copy", {
      src_session_id: s,
      src_path: "f.bin",
      dst_session_id: local.session_id,
      dst_path: "gw.bin",
    });
    const grant = await waitFor(() => up.calls.find((c) => c.op === "transfer_http_upload"), {
      timeoutMs: 30_000,
      what: "the upload grant",
    });
    const url = grant.args.url as string;
    const head = (headers: Record<string, string>) =>
      fetch(url, {
        method: "HEAD",
        headers: {
          authorization: grant.args.authorization as string,
          "x-local-shell-mcp-transfer-direction": "upload",
          ...headers,
        },
      }).then((r) => r.status);
    const put = (headers: Record<string, string>) =>
      fetch(url, {
        method: "PUT",
        body: content.subarray(0, MiB),
        headers: {
          authorization: grant.args.authorization as string,
          "content-range": `bytes 0-${MiB - 1}/${content.length}`,
          "x-content-sha256": sha(content.subarray(0, MiB)),
          ...headers,
        },
      }).then(async (r) => ({ status: r.status, code: ((await r.json()) as { error?: string }).error }));
    // Replayed from the other worker, with or without naming the bound worker; a name alone.
    expect(await head({ "x-local-shell-mcp-worker-token": other.token })).toBe(401);
    expect(await head({ "x-local-shell-mcp-worker-token": other.token, "x-local-shell-mcp-worker": "gw-up" })).toBe(
      401,
    );
    expect(await head({ "x-local-shell-mcp-worker": "gw-up" })).toBe(401);
    expect(await put({ "x-local-shell-mcp-worker-token": other.token, "x-local-shell-mcp-worker": "gw-up" })).toEqual({
      status: 401,
      code: "transfer_unauthorized",
    });
    // The worker it was issued to: accepted, and nothing of the replay was committed.
    const res = await fetch(url, {
      method: "HEAD",
      headers: {
        authorization: grant.args.authorization as string,
        "x-local-shell-mcp-transfer-direction": "upload",
        "x-local-shell-mcp-worker-token": up.token,
      },
    });
    expect({ status: res.status, offset: res.headers.get("x-transfer-offset") }).toEqual({ status: 200, offset: "0" });
    up.result(grant.id, refuse("transfer_failed"));
    expect((await copy).isError).toBe(true);
  }, 120_000);
});
