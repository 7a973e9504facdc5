/**
 * The traps a model falls into (issue 15), each through the compiled binary: unknown arguments,
 * `async` for `async_`, invalid regexes, bounded timeouts, job/shell handle mix-ups, printed paths
 * passed back, output volume, and jobs and shells driven like servers and REPLs.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { errorCode, type McpHandle, openStdioSession, type StdioSession } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

describe("traps a model falls into", () => {
  let session: StdioSession;
  let ws: string;
  let mcp: McpHandle;
  let sid: string;

  beforeAll(async () => {
    session = await openStdioSession({
      prefix: "lsm-traps-",
      workdir: "proj",
      prepare: (workspace) => {
        mkdirSync(join(workspace, "proj", "src"), { recursive: true });
        writeFileSync(join(workspace, "proj", "a.txt"), "alpha\n");
        writeFileSync(join(workspace, "proj", "src", "main.py"), "def main():\n    return 42\n");
      },
    });
    ({ mcp, sid, workspace: ws } = session);
  });
  afterAll(() => session?.close());

  test("unknown arguments are refused with a did-you-mean, never ignored", async () => {
    const r = await mcp.call("bash", { session_id: sid, command: "true", timeot_s: 5 });
    expect(errorCode(r)).toBe("invalid_arguments");
    expect(text(r)).toContain("unknown argument for bash: timeot_s (did you mean timeout_s, in seconds?)");
    // A model that writes `timeout` learns the unit too, not only the name.
    const bare = await mcp.call("bash", { session_id: sid, command: "true", timeout: 5 });
    expect(text(bare)).toContain("timeout (did you mean timeout_s, in seconds?)");
    const s = await mcp.call("search", { session_id: sid, pattern: "x", path: "src" });
    expect(errorCode(s)).toBe("invalid_arguments");
    expect(text(s)).toContain("path (did you mean paths?)");
    expect((r._meta?.["local-shell-mcp/error"] as { unknown?: string[] } | undefined)?.unknown).toEqual(["timeot_s"]);
  });

  test("async is accepted as async_: the command runs as a job instead of timing out in the foreground", async () => {
    const r = await mcp.call("bash", { session_id: sid, command: "sleep 30", async: true, name: "alias" });
    expect(r.isError).toBeFalsy();
    const out = r.structuredContent as { mode: string; result: { job_id: string } };
    expect(out.mode).toBe("job");
    // Starting a job answers in compact text, not a JSON dump.
    expect(text(r)).toStartWith(`started job_id=${out.result.job_id} (running) in proj: sleep 30`);
    const cancel = await mcp.call("job", { session_id: sid, cancel: [out.result.job_id] });
    expect(text(cancel)).toMatch(new RegExp(`^${out.result.job_id} \\(alias\\) stopped`));
    const both = await mcp.call("bash", { session_id: sid, command: "true", async: true, async_: false });
    expect(errorCode(both)).toBe("invalid_arguments");
    expect(text(both)).toContain("async is an alias of async_");
  });

  test("an invalid regex is an error that points at regex=false", async () => {
    const r = await mcp.call("search", { session_id: sid, pattern: "main(" });
    expect(errorCode(r)).toBe("regex_invalid");
    expect(text(r)).toContain("pass regex=false to search for the literal text");
    const literal = await mcp.ok<{ count: number }>("search", { session_id: sid, pattern: "main(", regex: false });
    expect(literal.count).toBe(1);
  });

  test("a bounded command that times out says how to run it longer or in the background", async () => {
    const r = await mcp.call("bash", { session_id: sid, command: "sleep 20", timeout_s: 1 });
    const result = (r.structuredContent as { result: { timed_out: boolean } }).result;
    expect(result.timed_out).toBe(true);
    expect(text(r)).toContain("pass timeout_s up to 120 to allow longer, or run it in the background with async_=true");
  });

  test(
    "Ctrl-C alone needs no input_text and presses no " + "Enter; the output limit stated is what bash keeps",
    async () => {
      const shell = await mcp.ok<{ result: { shell_id: string } }>("bash", {
        session_id: sid,
        command: "sleep 60",
        pty: true,
        name: "interrupted",
      });
      const sent = await mcp.call("send_persistent_shell_input", {
        session_id: sid,
        shell_id: shell.result.shell_id,
        keys: ["Ctrl-C"],
      });
      expect(sent.isError).toBeFalsy();
      expect(text(sent)).toBe(`sent 0 bytes and C-c to ${shell.result.shell_id}`);
      // The interrupt reached the program: sleep ends by SIGINT (exit 130), with no Enter after it.
      const out = await mcp.ok<{ status: string; exit_code: number | null }>("read_persistent_shell_output", {
        session_id: sid,
        shell_id: shell.result.shell_id,
        wait_for_idle_ms: 300,
        timeout_s: 20,
      });
      expect(out).toMatchObject({ status: "exited", exit_code: 130 });
      await mcp.ok("kill_persistent_shell", { session_id: sid, shell_id: shell.result.shell_id });
      const started = await mcp.call("session_start", { workdir: "." });
      expect(text(started)).toContain("output 30000 bytes per call (max_output_bytes up to 200000)");
      const env = (started.structuredContent as { environment: { runtime: { python_implementation: string } } })
        .environment;
      expect(env.runtime.python_implementation).not.toBe("bun");
    },
  );

  test("job_not_found and shell_not_found name the other kind of handle", async () => {
    const shell = await mcp.ok<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "sleep 60",
      pty: true,
      name: "napper",
    });
    const job = await mcp.ok<{ result: { job_id: string } }>("bash", {
      session_id: sid,
      command: "sleep 60",
      async_: true,
    });
    const asJob = await mcp.call("job", { session_id: sid, poll: [shell.result.shell_id] });
    expect(errorCode(asJob)).toBe("job_not_found");
    expect(text(asJob)).toContain("napper is a persistent shell, not a job: use read_persistent_shell_output");
    const asShell = await mcp.call("read_persistent_shell_output", { session_id: sid, shell_id: job.result.job_id });
    expect(errorCode(asShell)).toBe("shell_not_found");
    expect(text(asShell)).toContain(
      `${job.result.job_id} is a background job, not a persistent shell: use job poll=["${job.result.job_id}"]`,
    );
    // An id that is neither keeps the plain message.
    expect(text(await mcp.call("job", { session_id: sid, poll: ["job_000000000000"] }))).toBe(
      "[job_not_found] job not found in session: job_000000000000",
    );
    const killed = await mcp.call("kill_persistent_shell", { session_id: sid, shell_id: "napper" });
    expect(text(killed)).toBe("killed shell napper");
    await mcp.ok("job", { session_id: sid, cancel: [job.result.job_id] });
  });

  test("paths the server printed are accepted back; a missing path suggests the nearest spelling", async () => {
    // The workdir is proj/, and outputs are workspace-relative: search prints proj/src/main.py.
    const found = await mcp.call("search", { session_id: sid, pattern: "return 42" });
    expect(text(found)).toContain("[proj/src/main.py#");
    const printed = await mcp.ok<{ content: string; path: string }>("read", {
      session_id: sid,
      path: "proj/src/main.py",
    });
    const plain = await mcp.ok<{ content: string; path: string }>("read", { session_id: sid, path: "src/main.py" });
    expect(printed.path).toBe("proj/src/main.py");
    expect(printed.content.replace(/#[0-9a-f]+\]/, "]")).toBe(plain.content.replace(/#[0-9a-f]+\]/, "]"));
    const missing = await mcp.call("read", { session_id: sid, path: "src/mian.py" });
    expect(errorCode(missing)).toBe("path_not_found");
    expect(text(missing)).toBe("[path_not_found] no such file or directory: src/mian.py; did you mean src/main.py?");
    // When both readings exist the path is ambiguous, and "./" picks the workdir-relative one.
    mkdirSync(join(ws, "proj", "proj"));
    writeFileSync(join(ws, "proj", "proj", "a.txt"), "inner\n");
    const both = await mcp.call("read", { session_id: sid, path: "proj/a.txt" });
    expect(errorCode(both)).toBe("path_ambiguous");
    expect((await mcp.ok<{ content: string }>("read", { session_id: sid, path: "./proj/a.txt" })).content).toContain(
      "1:inner",
    );
    // bash prints its cwd workspace-relative; that spelling works as a cwd too.
    const inSrc = await mcp.ok<{ cwd: string; result: { stdout: string } }>("bash", {
      session_id: sid,
      command: "pwd",
      cwd: "proj/src",
    });
    expect(inSrc.cwd).toBe("proj/src");
    expect(inSrc.result.stdout).toBe(`${join(ws, "proj", "src")}\n`);
    // A path outside the workdir stays refused, printed or not.
    expect(await mcp.fails("read", { session_id: sid, path: "../outside.txt" })).toBe("path_outside_workdir");
  });

  test("bash keeps about 30 KB by default, head and tail, and says how to see the rest", async () => {
    const r = await mcp.call("bash", { session_id: sid, command: "seq 1 200000" });
    const result = (r.structuredContent as { result: { stdout: string; truncated: boolean; stdout_bytes: number } })
      .result;
    expect(result.truncated).toBe(true);
    expect(Buffer.byteLength(result.stdout)).toBeLessThanOrEqual(30_000);
    expect(result.stdout).toStartWith("1\n2\n3\n");
    expect(result.stdout).toEndWith("199999\n200000\n");
    expect(result.stdout).toMatch(/\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n/);
    expect(text(r)).toContain(
      "redirect to a file (… > out.log 2>&1) and read out.log with a line range, or pass max_output_bytes up to",
    );
    const asked = await mcp.ok<{ result: { stdout: string; truncated: boolean } }>("bash", {
      session_id: sid,
      command: "seq 1 20000",
      max_output_bytes: 200_000,
    });
    expect(asked.result.truncated).toBe(false);
  });

  test("job poll waits for a line, then continues from an offset without resending", async () => {
    const started = await mcp.ok<{ result: { job_id: string } }>("bash", {
      session_id: sid,
      command: "echo booting; sleep 1; echo ready on 8000; sleep 60",
      async_: true,
    });
    const id = started.result.job_id;
    const first = await mcp.call("job", { session_id: sid, poll: [id], wait_for: "^ready on \\d+", wait_s: 30 });
    const out = (
      first.structuredContent as { outputs: Array<{ output: string; next_offset: number; matched: boolean }> }
    ).outputs[0]!;
    expect(out.matched).toBe(true);
    expect(out.output).toBe("booting\nready on 8000");
    expect(text(first)).toContain(`[next_offset ${out.next_offset}]`);
    const again = await mcp.ok<{ outputs: Array<{ output: string; next_offset: number }> }>("job", {
      session_id: sid,
      poll: [id],
      offset: out.next_offset,
    });
    expect(again.outputs[0]!.output).toBe("");
    expect(again.outputs[0]!.next_offset).toBe(out.next_offset);
    expect(await mcp.fails("job", { session_id: sid, poll: [id], wait_for: "(" })).toBe("regex_invalid");
    await mcp.ok("job", { session_id: sid, cancel: [id] });
  });

  test(
    "shell output after exit drops blank rows and tmux's " + "Pane is dead line; the status is in the footer",
    async () => {
      const shell = await mcp.ok<{ result: { shell_id: string } }>("bash", {
        session_id: sid,
        command: "echo first; echo last; exit 3",
        pty: true,
      });
      const id = shell.result.shell_id;
      let r: CallToolResult | undefined;
      await waitFor(
        async () => {
          r = await mcp.call("read_persistent_shell_output", { session_id: sid, shell_id: id });
          return (r.structuredContent as { status: string }).status === "exited";
        },
        { timeoutMs: 20_000, what: "the shell to exit" },
      );
      expect(text(r!)).toMatch(/^first\nlast\n\[next_offset \d+; exited 3\]$/);
      await mcp.ok("kill_persistent_shell", { session_id: sid, shell_id: id });
    },
  );

  describe("edits that retry in one shot", () => {
    const put = (name: string, body: string) => writeFileSync(join(ws, "proj", name), body);
    const headerOf = async (name: string) =>
      /^\[[^\]]+\]/.exec((await mcp.ok<{ content: string }>("read", { session_id: sid, path: name })).content)![0];

    test("old_text_mismatch shows what was sent and what the line has, whitespace visible", async () => {
      put("tabs.py", "def f():\n\treturn 1\n");
      const header = await headerOf("tabs.py");
      const r = await mcp.call("hashline_edit", { session_id: sid, input: `${header}\n2:    return 1\n+\treturn 2` });
      expect(errorCode(r)).toBe("old_text_mismatch");
      expect(text(r)).toContain(
        'line 2 does not read as sent (first difference at column 1):\n  sent:   "    return 1"\n  actual: ' +
          '"\\treturn 1"',
      );
      expect(text(r)).toContain("2:\treturn 1");
    });

    test("snapshot_not_found offers the lines around the target, not the top of the file", async () => {
      put("long.txt", `${Array.from({ length: 40 }, (_, i) => `line ${i + 1}`).join("\n")}\n`);
      const r = await mcp.call("hashline_edit", {
        session_id: sid,
        input: "[proj/long.txt#0123456789ab]\n30:line 30\n+line thirty",
      });
      expect(errorCode(r)).toBe("snapshot_not_found");
      expect(text(r)).toContain("Current lines 27-33 to retry with:\n[proj/long.txt#");
      expect(text(r)).toContain("\n30:line 30\n");
      expect(text(r)).not.toContain("\n1:line 1\n");
    });

    test(
      "a failed apply_patch hunk shows the nearest actual lines " + "under a snapshot; success returns fresh snapshots",
      async () => {
        put(
          "cfg.py",
          ["import os", "", "def load():", "    path = os.environ['CFG']", "    return open(path).read()", ""].join(
            "\n",
          ),
        );
        const bad = await mcp.call("apply_patch", {
          session_id: sid,
          patch:
            "*** Begin Patch\n*** Update File: cfg.py\n@@\n def load():\n-    path = os.environ['CONFIG']\n+  " +
            "  path = os.environ.get('CFG', 'cfg.ini')\n     return open(path).read()\n*** End Patch",
        });
        expect(errorCode(bad)).toBe("patch_failed");
        const msg = text(bad);
        expect(msg).toContain("Nearest lines in proj/cfg.py (1-5), as the file has them now:\n[proj/cfg.py#");
        expect(msg).toContain("4:    path = os.environ['CFG']");
        // A hunk none of whose lines the file has still shows lines to retry with (from its place).
        const lost = await mcp.call("apply_patch", {
          session_id: sid,
          patch: "*** Begin Patch\n*** Update File: cfg.py\n@@\n-nothing like this\n+x\n*** End Patch",
        });
        expect(errorCode(lost)).toBe("patch_failed");
        expect(text(lost)).toContain("Nearest lines in proj/cfg.py (1-");
        expect(text(lost)).toContain("1:import os");
        // The rows can be used as they are: the snapshot grounds a hashline_edit.
        const snapHeader = /\[proj\/cfg\.py#[0-9a-f]+\]/.exec(msg)![0];
        await mcp.ok("hashline_edit", {
          session_id: sid,
          input: `${snapHeader}\n4:    path = os.environ['CFG']\n+    path = os.environ.get('CFG', 'cfg.ini')`,
        });
        const good = await mcp.call("apply_patch", {
          session_id: sid,
          patch:
            "*** Begin Patch\n*** Update File: cfg.py\n@@\n def load():\n     path = os.environ.get('CFG', " +
            "'cfg.ini')\n-    return open(path).read()\n+    with open(path) as f:\n+        return " +
            "f.read()\n*** End Patch",
        });
        expect(good.isError).toBeFalsy();
        const files = (good.structuredContent as { files: Array<{ context?: string }> }).files;
        expect(files[0]!.context).toMatch(/^\[proj\/cfg\.py#[0-9a-f]+\]\n2:\n3:def load\(\):/);
        expect(text(good)).toContain(`fresh context:\n${files[0]!.context}`);
        const fresh = /^\[[^\]]+\]/.exec(files[0]!.context!)![0];
        await mcp.ok("hashline_edit", {
          session_id: sid,
          input: `${fresh}\n6:        return f.read()\n+        return f.read().strip()`,
        });
        expect(readFileSync(join(ws, "proj", "cfg.py"), "utf8")).toContain("return f.read().strip()");
      },
    );

    test("an edit that changes nothing says so and writes nothing", async () => {
      put("same.txt", "one\ntwo\n");
      const before = statSync(join(ws, "proj", "same.txt")).mtimeMs;
      const header = await headerOf("same.txt");
      const r = await mcp.call("hashline_edit", { session_id: sid, input: `${header}\n2:two\n+two` });
      expect(text(r)).toStartWith("no change: the new lines equal the current ones; nothing was written");
      const lines = await mcp.call("edit_lines", {
        session_id: sid,
        path: "same.txt",
        start_line: 1,
        end_line: 1,
        replacement: "one\n",
      });
      expect(text(lines)).toStartWith("no change: the replacement equals the current lines; nothing was written");
      expect(statSync(join(ws, "proj", "same.txt")).mtimeMs).toBe(before);
    });
  });
});
