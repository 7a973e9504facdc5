import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { McpError, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import {
  connectHttp,
  connectStdio,
  type McpHandle,
  startHttpServer,
  stopStateLeftovers,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { obtainToken } from "../oauth/flow.ts";
import { waitFor } from "../helpers/wait.ts";

let ws: TempDir;
let state: TempDir;
let xdg: TempDir;
let mcp: McpHandle;
let sid: string;

const put = (path: string, text: string) => {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, text);
};

beforeAll(async () => {
  ws = tempDir("lsm-pc-ws-");
  state = tempDir("lsm-pc-state-");
  xdg = tempDir("lsm-pc-xdg-");
  put(join(ws.path, "proj", "package.json"), JSON.stringify({ scripts: { test: "bun test" } }));
  put(join(ws.path, "proj", "src", "main.ts"), "console.log(1);\n");
  put(join(ws.path, "proj", "src", "mcp.ts"), "\n");
  put(join(ws.path, "proj", "spec", "x.test.ts"), "\n");
  put(
    join(ws.path, ".agents", "skills", "deploy-notes", "SKILL.md"),
    "---\ndescription: How we deploy\n---\n# Deploy\nStep one.\n",
  );
  put(join(ws.path, ".agents", "skills", "deploy-notes", "ref", "hosts.md"), "hosts\n");
  mcp = await connectStdio({ workspace: ws.path, state: state.path, env: { XDG_CONFIG_HOME: xdg.path } });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "proj" })).session_id;
});
afterAll(async () => {
  await mcp?.close();
  // The persistent shell and the job started above.
  if (state) stopStateLeftovers(state.path);
  for (const d of [ws, state, xdg]) d?.[Symbol.dispose]();
});

async function refused(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(McpError);
    return String(((e as McpError).data as { code?: string } | undefined)?.code);
  }
  throw new Error("the request unexpectedly succeeded");
}

const text = (r: { messages: Array<{ content: { type: string; text?: string } }> }) =>
  r.messages.map((m) => m.content.text ?? "").join("\n");

describe("prompts through the binary", () => {
  test("prompts/list offers our two prompts and one per Agent Skill", async () => {
    const { prompts } = await mcp.client.listPrompts();
    const byName = Object.fromEntries(prompts.map((p) => [p.name, p]));
    expect(Object.keys(byName).sort()).toEqual(["orient_repository", "run_tests", "skill_deploy-notes"]);
    expect(byName.run_tests!.arguments).toEqual([
      { name: "session_id", description: expect.any(String), required: true },
      { name: "filter", description: expect.any(String), required: false },
    ]);
    expect(byName["skill_deploy-notes"]!.description).toBe("How we deploy");
  });

  test("orient_repository names the workdir's entries and the test command", async () => {
    const r = await mcp.client.getPrompt({ name: "orient_repository", arguments: { session_id: sid } });
    expect(text(r)).toContain("package.json\nspec/\nsrc/");
    expect(text(r)).toContain("`npm test`");
  });

  test("run_tests carries its filter; a missing session_id is refused", async () => {
    const r = await mcp.client.getPrompt({ name: "run_tests", arguments: { session_id: sid, filter: "parser" } });
    expect(text(r)).toContain("`npm test`");
    expect(text(r)).toContain('"parser"');
    expect(await refused(mcp.client.getPrompt({ name: "run_tests", arguments: {} }))).toBe("invalid_arguments");
    expect(await refused(mcp.client.getPrompt({ name: "run_tests", arguments: { session_id: "ZZZZZZZZ" } }))).toBe(
      "session_not_found",
    );
    expect(await refused(mcp.client.getPrompt({ name: "no_such_prompt" }))).toBe("prompt_not_found");
  });

  test("a Skill prompt gives its SKILL.md, the task, and its files", async () => {
    const r = await mcp.client.getPrompt({ name: "skill_deploy-notes", arguments: { task: "ship v2" } });
    expect(text(r)).toContain("ship v2");
    expect(text(r)).toContain("# Deploy\nStep one.");
    expect(text(r)).toContain("ref/hosts.md");
    expect(await refused(mcp.client.getPrompt({ name: "skill_nope" }))).toBe("skill_not_found");
  });
});

describe("completions through the binary", () => {
  const ask = (name: string, value: string, args?: Record<string, string>) =>
    mcp.client.complete({
      ref: { type: "ref/resource", uri: "lsm://session/{session_id}/file/{+path}" },
      argument: { name, value },
      ...(args ? { context: { arguments: args } } : {}),
    });

  test("session ids, job ids and shell ids complete from the caller's own", async () => {
    expect((await ask("session_id", sid.slice(0, 3))).completion.values).toEqual([sid]);
    expect((await ask("session_id", "#")).completion.values).toEqual([]);
    const job = (
      await mcp.ok<{ result: { job_id: string } }>("bash", { session_id: sid, command: "true", async_: true })
    ).result.job_id;
    expect((await ask("job_id", "job_", { session_id: sid })).completion.values).toEqual([job]);
    const shell = (
      await mcp.ok<{ result: { shell_id: string } }>("bash", { session_id: sid, command: "cat", pty: true })
    ).result.shell_id;
    expect((await ask("shell_id", "", { session_id: sid })).completion.values).toContain(shell);
    // Without the session they belong to there is nothing to offer.
    expect((await ask("job_id", "job_")).completion.values).toEqual([]);
  });

  test("paths complete inside the workdir only, folders with a slash", async () => {
    expect((await ask("path", "s", { session_id: sid })).completion.values).toEqual(["spec/", "src/"]);
    expect((await ask("path", "src/m", { session_id: sid })).completion.values).toEqual(["src/main.ts", "src/mcp.ts"]);
    expect((await ask("path", "../", { session_id: sid })).completion.values).toEqual([]);
    // A name the path denylist refuses is not offered.
    writeFileSync(join(ws.path, "proj", ".env"), "TOKEN=abc\n");
    writeFileSync(join(ws.path, "proj", ".envrc"), "\n");
    expect((await ask("path", ".e", { session_id: sid })).completion.values).toEqual([".envrc"]);
    expect((await ask("path", "/etc/", { session_id: sid })).completion.values).toEqual([]);
  });

  test("at most 100 values, with the total and hasMore", async () => {
    for (let i = 0; i < 150; i++) writeFileSync(join(ws.path, "proj", `many-${i}.txt`), "");
    const c = (await ask("path", "many-", { session_id: sid })).completion;
    expect(c.values.length).toBe(100);
    expect(c.total).toBe(150);
    expect(c.hasMore).toBe(true);
  });

  test("tool names complete from the listed tools", async () => {
    const r = await ask("tool", "session_");
    expect(r.completion.values).toEqual(["session_change_cwd", "session_copy", "session_end", "session_start"]);
  });

  test("Skill names complete for a prompt argument called name", async () => {
    const r = await mcp.client.complete({
      ref: { type: "ref/prompt", name: "run_tests" },
      argument: { name: "name", value: "dep" },
    });
    expect(r.completion.values).toEqual(["deploy-notes"]);
  });
});

describe("ownership over HTTP with OAuth", () => {
  const PIN = "native-pin-5521";
  test("another client sees no resource, prompt or completion of a session; the owner gets updates", async () => {
    using dir = tempDir();
    writeFileSync(join(dir.path, "notes.txt"), "private notes\n");
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state") },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const a = await obtainToken(server.url, PIN);
      const b = await obtainToken(server.url, PIN);
      await using alice = await connectHttp(server.url, { authorization: `Bearer ${a.token}` });
      await using bob = await connectHttp(server.url, { authorization: `Bearer ${b.token}` });
      const owned = (await alice.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      const notes = `lsm://session/${owned}/file/notes.txt`;
      expect((await alice.client.readResource({ uri: notes })).contents[0]).toMatchObject({ text: "private notes\n" });
      expect((await alice.client.listResources()).resources.map((r) => r.uri)).toContain(notes);

      expect((await bob.client.listResources()).resources).toEqual([]);
      expect(await refused(bob.client.readResource({ uri: notes }))).toBe("session_owner_mismatch");
      expect(await refused(bob.client.subscribeResource({ uri: notes }))).toBe("session_owner_mismatch");
      expect(await refused(bob.client.getPrompt({ name: "orient_repository", arguments: { session_id: owned } }))).toBe(
        "session_owner_mismatch",
      );
      const c = await bob.client.complete({
        ref: { type: "ref/prompt", name: "orient_repository" },
        argument: { name: "session_id", value: "" },
      });
      expect(c.completion.values).toEqual([]);
      const p = await bob.client.complete({
        ref: { type: "ref/prompt", name: "run_tests" },
        argument: { name: "path", value: "" },
        context: { arguments: { session_id: owned } },
      });
      expect(p.completion.values).toEqual([]);

      // Over Streamable HTTP the update reaches the owner on its standalone stream.
      const updates: string[] = [];
      alice.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updates.push(n.params.uri));
      await alice.client.subscribeResource({ uri: notes });
      await alice.ok("bash", { session_id: owned, command: "echo changed > notes.txt" });
      await waitFor(() => updates.includes(notes), { timeoutMs: 10_000, what: "resources/updated over HTTP" });
    } finally {
      await server.stop();
    }
  }, 60_000);
});
