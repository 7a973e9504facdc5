import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import contract from "../fixtures/contract/tool-contract.json" with { type: "json" };
import {
  connectHttp,
  connectStdio,
  type HttpServer,
  type McpHandle,
  processesMatching,
  startHttp,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

/** The server maximum for command timeouts: long enough that no command here races it. */
const MAX_TIMEOUT_S = 30;

/** Contract tools offered only over HTTP (spec §3.6 and §1.9: download URLs and worker channels need a listener). */
/**
 * Not listed by this stdio server: HTTP-only tools (links, remote workers, the ChatGPT connector
 * pair), and the Agent Bridge, which stdio lists only when something is configured for it.
 */
const HTTP_ONLY = new Set([
  ...["create_file_link", "list_file_links", "revoke_file_link", "remote_admin", "workspace_search", "fetch"],
  ...["agent_config_status", "list_agent_mcp_servers", "list_agent_mcp_tools", "call_agent_mcp_tool"],
  ...["list_agent_skills", "activate_agent_skill", "read_agent_skill_file"],
]);
/** Arguments the contract requires that we accept omitted (issue 31: Ctrl-C alone needs no text). */
const MADE_OPTIONAL: Record<string, string[]> = { send_persistent_shell_input: ["input_text"] };
/** Arguments of remote sessions, advertised only where remote workers are offered. */
const REMOTE_ARGS = new Set(["target", "machine", "force"]);

// The same suite over both transports: stdio and Streamable HTTP (auth none, loopback).
describe.each(["stdio", "http"] as const)("over %s", (transport) => {
  let ws: TempDir;
  let state: TempDir;
  let mcp: McpHandle;
  let outside: TempDir;
  let server: HttpServer | undefined;

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    outside = tempDir("lsm-out-");
    mkdirSync(join(ws.path, "proj", "sub"), { recursive: true });
    writeFileSync(join(ws.path, "proj", "AGENTS.md"), "be nice\n");
    writeFileSync(join(ws.path, "AGENTS.md"), "root rules\n");
    writeFileSync(join(ws.path, "notes.txt"), "x\n");
    symlinkSync(outside.path, join(ws.path, "proj", "escape"));
    const s = {
      workspace: ws.path,
      state: state.path,
      args: [
        "--max-output-bytes",
        "4096",
        "--run-shell-max-timeout-s",
        String(MAX_TIMEOUT_S),
        "--run-shell-default-timeout-s",
        "3",
      ],
    };
    if (transport === "stdio") mcp = await connectStdio(s);
    else {
      server = await startHttp(s);
      mcp = await connectHttp(server.url);
    }
  });

  afterAll(async () => {
    await mcp?.close();
    await server?.stop();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
    outside?.[Symbol.dispose]();
  });

  /**
   * Pid files for processes a command starts in the background: each writes its pid before it
   * becomes `sleep <arg>`, so a "nothing left behind" check can first confirm the thing ran.
   */
  function pidFiles(name: string) {
    const dir = join(outside.path, name);
    mkdirSync(dir);
    const files = (n: number) => Array.from({ length: n }, (_, i) => `${dir}/${i + 1}`);
    return {
      dir,
      sleeper: (i: number, arg: string) => `sh -c 'echo $$ > ${dir}/${i}; exec sleep ${arg}'`,
      /** Shell text that waits until n pid files have content. */
      awaitAll: (n: number) =>
        `until ${files(n)
          .map((f) => `[ -s ${f} ]`)
          .join(" && ")}; do sleep 0.01; done`,
      read: (n: number) =>
        files(n)
          .filter((f) => existsSync(f))
          .map((f) => Number(readFileSync(f, "utf8").trim())),
    };
  }

  async function session(workdir = "proj"): Promise<string> {
    const s = await mcp.ok<{ session_id: string }>("session_start", { workdir });
    return s.session_id;
  }

  describe("tools/list", () => {
    test("exactly the contract's tools (all 41 over HTTP), with its names, arguments and fields", async () => {
      const { tools } = await mcp.client.listTools();
      const expected = contract.tools
        .map((t) => t.name)
        .filter((n) => transport === "http" || !HTTP_ONLY.has(n))
        .sort();
      // Every exclusion names a real contract tool, so the list cannot silently hide a typo.
      for (const n of HTTP_ONLY) expect(contract.tools.map((t) => t.name)).toContain(n);
      expect(tools.map((t) => t.name).sort()).toEqual(expected);
      const byName = new Map(contract.tools.map((t) => [t.name, t]));
      for (const tool of tools) {
        const ref = byName.get(tool.name)!;
        const ours = tool.inputSchema as { properties?: Record<string, unknown>; required?: string[] };
        const theirs = ref.inputSchema as { properties?: Record<string, unknown>; required?: string[] };
        const wanted = Object.keys(theirs.properties ?? {}).filter((k) => transport === "http" || !REMOTE_ARGS.has(k));
        expect(Object.keys(ours.properties ?? {}), tool.name).toEqual(expect.arrayContaining(wanted));
        const required = (theirs.required ?? []).filter((k) => !(MADE_OPTIONAL[tool.name] ?? []).includes(k));
        expect([...(ours.required ?? [])].sort(), tool.name).toEqual(required.sort());
        const outRequired = (ref.outputSchema as { required?: string[] }).required ?? [];
        expect(Object.keys((tool.outputSchema as { properties: object }).properties), tool.name).toEqual(
          expect.arrayContaining(outRequired),
        );
        expect(tool.annotations).toMatchObject(ref.annotations);
        expect(tool.description?.length ?? 0).toBeGreaterThan(20);
      }
    });

    test("server instructions explain sessions, the edit workflow and the three handles", () => {
      const text = mcp.client.getInstructions() ?? "";
      for (const phrase of [
        "session_start(workdir=",
        "hashline_edit",
        "[path#snapshot_id]",
        "Body rows are final content only",
        "job_id",
        "shell_id",
        "secret_scan",
      ]) {
        expect(text).toContain(phrase);
      }
    });

    test("security schemes: the connector pair hints noauth first, every tool names its scopes", async () => {
      const { tools } = await mcp.client.listTools();
      for (const tool of tools) {
        const schemes = (tool._meta as { securitySchemes: Array<{ type: string; scopes?: string[] }> }).securitySchemes;
        if (tool.name === "workspace_search" || tool.name === "fetch") {
          expect(schemes[0]).toEqual({ type: "noauth" });
          expect(schemes[1]).toEqual({ type: "oauth2", scopes: ["shell:read"] });
        } else {
          expect(schemes[0]!.type, tool.name).toBe("oauth2");
          expect(schemes[0]!.scopes!.length, tool.name).toBeGreaterThan(0);
        }
      }
    });
  });

  describe("sessions", () => {
    test("start returns orientation without private data", async () => {
      const s = await mcp.ok<Record<string, any>>("session_start", { workdir: "proj/sub", label: "t" });
      expect(s.session_id).toMatch(/^[A-Za-z0-9]{8}$/);
      expect(s.workdir).toBe(join(ws.path, "proj", "sub"));
      expect(s.instruction_files).toEqual(["proj/AGENTS.md", "AGENTS.md"]);
      expect(s.git.is_repo).toBe(false);
      expect(s.environment.policy.max_output_bytes).toBe(4096);
      expect(s.environment.tools.shell.available).toBe(true);
      const text = JSON.stringify(s);
      expect(text).not.toContain(state.path);
      expect(text).not.toContain("denylist");
    });

    test("git orientation", async () => {
      const repo = join(ws.path, "repo");
      mkdirSync(repo);
      Bun.spawnSync(["git", "init", "-q", "-b", "trunk", repo]);
      writeFileSync(join(repo, "a.txt"), "a");
      const s = await mcp.ok<Record<string, any>>("session_start", { workdir: "repo" });
      expect(s.git).toEqual({ is_repo: true, root: repo, branch: "trunk", dirty: true });
    });

    test("change_cwd and end", async () => {
      const sid = await session();
      const moved = await mcp.ok<Record<string, any>>("session_change_cwd", { session_id: sid, workdir: "proj/sub" });
      expect(moved.workdir).toBe(join(ws.path, "proj", "sub"));
      const pwd = await mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "pwd" });
      expect(pwd.result.stdout.trim()).toBe(join(ws.path, "proj", "sub"));
      const ended = await mcp.ok<Record<string, any>>("session_end", { session_id: sid });
      expect(ended.ended).toBe(true);
      expect(await mcp.fails("bash", { session_id: sid, command: "true" })).toBe("session_not_found");
    });

    test.each([
      [{ workdir: "../" }, "path_outside_workspace"],
      [{ workdir: "/etc" }, "path_outside_workspace"],
      [{ workdir: "proj/../../" }, "path_outside_workspace"],
      [{ workdir: "proj/escape" }, "path_outside_workspace"],
      [{ workdir: "pr\u0000oj" }, "path_invalid"],
      [{ workdir: "missing" }, "path_not_found"],
      [{ workdir: "notes.txt" }, "not_a_directory"],
      [{ workdir: "proj", label: "" }, "invalid_arguments"],
      [{}, "invalid_arguments"],
    ])("session_start %p → %s", async (args, code) => {
      expect(await mcp.fails("session_start", args)).toBe(code);
    });

    test("bad input on other tools", async () => {
      expect(await mcp.fails("bash", { session_id: "AAAAAAAA", command: "true" })).toBe("session_not_found");
      expect(await mcp.fails("bash", { session_id: "short", command: "true" })).toBe("invalid_arguments");
      // An unknown tool is a JSON-RPC error (-32602, invalid params), not a failed call.
      await expect(mcp.call("no_such_tool", {})).rejects.toMatchObject({ code: -32602 });
      const sid = await session();
      expect(await mcp.fails("bash", { session_id: sid, command: "x".repeat(7_000_000) })).toBe("arguments_too_large");
      expect(await mcp.fails("bash", { session_id: sid, command: "true", cwd: "../.." })).toBe("path_outside_workdir");
      expect(await mcp.fails("bash", { session_id: sid, command: "true", cwd: "escape" })).toBe("path_outside_workdir");
      expect(await mcp.fails("bash", { session_id: sid, command: "true", env: { "BAD-NAME": "1" } })).toBe(
        "env_name_invalid",
      );
    });

    test("version", async () => {
      const v = await mcp.ok<Record<string, string>>("version");
      expect(v.version).toMatch(/^\d+\.\d+\.\d+/);
    });
  });

  type Cmd = { mode: string; result: Record<string, any> };

  describe("bash bounded mode", () => {
    test("exit codes, separate streams, env and cwd applied to the process", async () => {
      const sid = await session();
      const r = await mcp.ok<Cmd>("bash", {
        session_id: sid,
        command: 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3',
        env: { GREETING: 'it\'s "quoted" $HOME' },
        cwd: "sub",
      });
      expect(r.mode).toBe("command");
      expect(r.result.exit_code).toBe(3);
      expect(r.result.ok).toBe(false);
      expect(r.result.stdout).toBe(`it's "quoted" $HOME from ${join(ws.path, "proj", "sub")}\n`);
      expect(r.result.stderr).toBe("oops\n");
      expect(r.result.cwd).toBe("proj/sub");
      const ok = await mcp.ok<Cmd>("bash", { session_id: sid, command: "true" });
      expect(ok.result.ok).toBe(true);
      expect(ok.result.exit_code).toBe(0);
    });

    test("server variables are not inherited", async () => {
      const sid = await session();
      const r = await mcp.ok<Cmd>("bash", { session_id: sid, command: "env | grep -c '^LOCAL_SHELL_MCP_' || true" });
      expect(r.result.stdout.trim()).toBe("0");
    });

    test("output caps keep the tail of each stream", async () => {
      const sid = await session();
      const r = await mcp.ok<Cmd>("bash", { session_id: sid, command: "seq 1 100000; seq 1 5 >&2" });
      expect(r.result.truncated).toBe(true);
      expect(r.result.stdout.endsWith("99999\n100000\n")).toBe(true);
      expect(r.result.stderr).toBe("1\n2\n3\n4\n5\n");
      expect(Buffer.byteLength(r.result.stdout) + Buffer.byteLength(r.result.stderr)).toBeLessThanOrEqual(4096);
      expect(r.result.stdout_bytes).toBe(588895);
      const small = await mcp.ok<Cmd>("bash", { session_id: sid, command: "printf abcdefghij", max_output_bytes: 4 });
      expect(small.result.stdout).toBe("ghij");
      const big = await mcp.ok<Cmd>("bash", {
        session_id: sid,
        command: "head -c 10000 /dev/zero | tr '\\0' a",
        max_output_bytes: 1_000_000,
      });
      expect(big.result.stdout.length).toBe(4096);
    });

    test("non-UTF-8 output is replaced and flagged", async () => {
      const sid = await session();
      const r = await mcp.ok<Cmd>("bash", { session_id: sid, command: "printf 'a\\377b'" });
      expect(r.result.stdout).toBe("a\uFFFDb");
      expect(r.result.stdout_lossy).toBe(true);
    });

    test("timeout kills the whole tree and is clamped to the maximum with a note", async () => {
      const sid = await session();
      // Durations unique to this run: leftovers of another run can never be mistaken for ours.
      const tag = `9${process.pid % 1000}${Date.now() % 100000}`;
      const pids = pidFiles(`timeout-${tag}`);
      const tree =
        `(${pids.sleeper(1, `${tag}1`)} & ${pids.sleeper(2, `${tag}2`)}; echo never) ` +
        `& ${pids.sleeper(3, `${tag}3`)}`;
      const started = Date.now();
      const r = await mcp.ok<Cmd>("bash", { session_id: sid, command: tree, timeout_s: 5 });
      expect(r.result.timed_out).toBe(true);
      expect(r.result.ok).toBe(false);
      // The sleepers run for days; a generous bound (5 s timeout, ~3x headroom) only shows the
      // timeout ended the call rather than the sleepers.
      expect(Date.now() - started).toBeLessThan(20_000);
      // All three really ran, and none of them is left.
      expect(pids.read(3).length).toBe(3);
      await waitFor(() => processesMatching(`sleep ${tag}`).length === 0, { what: "the timed-out tree to be gone" });
      const clamped = await mcp.ok<Cmd>("bash", { session_id: sid, command: "true", timeout_s: 10_000 });
      expect(clamped.result.timeout_s).toBe(MAX_TIMEOUT_S);
      expect(clamped.result.notes.join(" ")).toContain("clamped");
    });

    test("containment: setsid, double-fork and nohup leftovers are gone when bash returns", async () => {
      const sid = await session();
      const tag = `${process.pid}${Date.now() % 100000}`;
      const pids = pidFiles(`contain-${tag}`);
      const cmd = [
        `setsid ${pids.sleeper(1, `7${tag}1`)} >/dev/null 2>&1 < /dev/null &`,
        `( ( ${pids.sleeper(2, `7${tag}2`)} >/dev/null 2>&1 < /dev/null & ) & )`,
        `nohup ${pids.sleeper(3, `7${tag}3`)} >/dev/null 2>&1 < /dev/null &`,
        pids.awaitAll(3),
        "echo launched",
      ].join("\n");
      const r = await mcp.ok<Cmd>("bash", { session_id: sid, command: cmd });
      expect(r.result.stdout).toBe("launched\n");
      // Each leftover recorded its pid once it ran: the check below is about real processes.
      const started = pids.read(3);
      expect(started.length).toBe(3);
      expect(processesMatching(`sleep 7${tag}`)).toEqual([]);
    });

    test("command denylist refuses on command words only", async () => {
      const sid = await session();
      expect(await mcp.fails("bash", { session_id: sid, command: "mount /dev/sda1 /mnt" })).toBe("command_denied");
      const r = await mcp.ok<Cmd>("bash", { session_id: sid, command: "grep amount notes.txt || echo none", cwd: "." });
      expect(r.result.stdout).toBe("none\n");
    });

    test("session_end stops the session's running command instead of waiting for it", async () => {
      const sid = await session();
      const tag = `66${Date.now() % 1000000}`;
      const running = mcp.call("bash", { session_id: sid, command: `sleep ${tag}`, timeout_s: MAX_TIMEOUT_S });
      await waitFor(() => processesMatching(`sleep ${tag}`).length > 0, { what: "the command to run" });
      await mcp.ok("session_end", { session_id: sid });
      // Stopped by the end, not by its own timeout (which would have said timed_out).
      const r = await running;
      expect((r.structuredContent as Cmd).result.timed_out).toBe(false);
      expect(processesMatching(`sleep ${tag}`)).toEqual([]);
    });

    test("concurrent commands in one session overlap", async () => {
      const sid = await session();
      // Each command announces itself, then waits for the other two: run one after another, the
      // first could never finish and would time out.
      const barrier = pidFiles(`overlap-${process.pid}-${Date.now()}`);
      const runs = await Promise.all(
        [1, 2, 3].map((i) =>
          mcp.ok<Cmd>("bash", {
            session_id: sid,
            command: `echo $$ > ${barrier.dir}/${i}; ${barrier.awaitAll(3)}; echo met`,
            timeout_s: MAX_TIMEOUT_S,
          }),
        ),
      );
      for (const r of runs) expect(r.result).toMatchObject({ timed_out: false, exit_code: 0, stdout: "met\n" });
    });
  });
});
