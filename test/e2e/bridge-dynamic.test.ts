import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { fixtureServer, processGone, writeManifest } from "../bridge/helpers.ts";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

type Listed = {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown>;
};

const sha1 = (s: string) => new Bun.CryptoHasher("sha1").update(s).digest("hex");

describe("Agent Bridge dynamic tools", () => {
  let ws: TempDir;
  let state: TempDir;
  let mcp: McpHandle;
  let changes = 0;
  const names = async () => (await mcp.client.listTools()).tools.map((t) => t.name);
  const manifest = (extra: Record<string, unknown> = {}) => ({
    version: 1,
    // Both server names sanitise to `up_stream`: the second gets the sha1 suffix.
    mcpServers: { "Up-Stream": fixtureServer(), "up.stream": fixtureServer({ enabled: true }) },
    ...extra,
  });

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    mkdirSync(join(state.path, "agent_config", "skills", "My Skill!"), { recursive: true });
    writeFileSync(
      join(state.path, "agent_config", "skills", "My Skill!", "SKILL.md"),
      "---\ndescription: Says hello.\n---\nHello.\n",
    );
    writeManifest(state.path, manifest());
    mcp = await connectStdio({ workspace: ws.path, state: state.path });
    mcp.client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changes++;
    });
  });

  afterAll(async () => {
    await mcp?.close();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  });

  test("upstream tools appear under sanitised, collision-free names with their real schemas", async () => {
    const collided = `agent_mcp__up_stream__echo__${sha1("up.stream\0echo").slice(0, 8)}`;
    await waitFor(
      async () => {
        const n = await names();
        return n.includes("agent_mcp__up_stream__echo") && n.includes(collided);
        // Each upstream starts within its own 30 s budget, one after the other, on a busy machine.
      },
      { what: "both upstreams' tools to be listed", timeoutMs: 60_000 },
    );
    const tools = (await mcp.client.listTools()).tools as Listed[];
    const strict = tools.find((t) => t.name === "agent_mcp__up_stream__strict")!;
    expect(strict.inputSchema).toMatchObject({
      type: "object",
      properties: { count: { type: "integer", minimum: 1, maximum: 10 } },
      required: ["count"],
    });
    expect(strict.description).toBe("[agent mcp: Up-Stream] Takes exactly a count from 1 to 10.");
    expect(strict.annotations).toMatchObject({ readOnlyHint: false });
    const skill = tools.find((t) => t.name === "activate_skill__my_skill")!;
    expect(skill.description).toBe("[agent skill] Activate My Skill!: Says hello.");
    const status = await mcp.ok<{ dynamic_tools: Record<string, boolean> }>("agent_config_status");
    expect(status.dynamic_tools).toEqual({ mcp: true, skills: true });
  });

  test("calls go through the pool with the upstream's schema enforced", async () => {
    const r = await mcp.ok<{ is_error: boolean; content: Array<{ text: string }>; server: string }>(
      "agent_mcp__up_stream__echo",
      { text: "dynamic" },
    );
    expect(r).toMatchObject({ is_error: false, server: "Up-Stream", content: [{ type: "text", text: "dynamic" }] });
    expect(await mcp.fails("agent_mcp__up_stream__strict", { count: 99 })).toBe("invalid_upstream_arguments");
    const s = await mcp.ok<{ content: string; name: string }>("activate_skill__my_skill");
    expect(s).toMatchObject({ name: "My Skill!", content: "---\ndescription: Says hello.\n---\nHello.\n" });
  });

  test("an upstream's new tool and a manifest change reach the client as list_changed", async () => {
    const before = changes;
    await mcp.ok("agent_mcp__up_stream__add_tool");
    await waitFor(async () => (await names()).includes("agent_mcp__up_stream__extra"), {
      what: "the upstream's new tool",
    });
    await waitFor(() => changes > before, { what: "a tools/list_changed notification" });
    const again = changes;
    writeManifest(state.path, manifest({ dynamicTools: { mcp: false, skills: true } }));
    await waitFor(async () => !(await names()).some((n) => n.startsWith("agent_mcp__")), {
      what: "the MCP dynamic tools to go",
    });
    await waitFor(() => changes > again, { what: "a second tools/list_changed" });
    expect(await names()).toContain("activate_skill__my_skill");
    await expect(mcp.call("agent_mcp__up_stream__echo", { text: "x" })).rejects.toMatchObject({ code: -32602 });
  });

  test("the setting turns dynamic tools off whatever the manifest says", async () => {
    await using off = await connectStdio({
      workspace: ws.path,
      state: state.path,
      args: ["--agent-dynamic-skill-tools", "false"],
    });
    const n = (await off.client.listTools()).tools.map((t) => t.name);
    expect(n.some((x) => x.startsWith("activate_skill__") || x.startsWith("agent_mcp__"))).toBe(false);
    expect(n).toContain("call_agent_mcp_tool");
  });
});

describe("dynamic tools of an idle upstream", () => {
  test("stay listed after its idle shutdown and start it again when called", async () => {
    using ws = tempDir("lsm-ws-");
    using state = tempDir("lsm-state-");
    writeManifest(state.path, { version: 1, mcpServers: { idle: fixtureServer({ idleTimeoutS: 1 }) } });
    await using mcp = await connectStdio({ workspace: ws.path, state: state.path });
    await waitFor(async () => (await mcp.client.listTools()).tools.some((t) => t.name === "agent_mcp__idle__whoami"), {
      what: "the idle server's tools",
    });
    const pid = Number(
      (await mcp.ok<{ structured_content: { pid: number } }>("agent_mcp__idle__whoami")).structured_content.pid,
    );
    await waitFor(() => processGone(pid), { what: "the idle shutdown" });
    expect((await mcp.client.listTools()).tools.map((t) => t.name)).toContain("agent_mcp__idle__whoami");
    const again = Number(
      (await mcp.ok<{ structured_content: { pid: number } }>("agent_mcp__idle__whoami")).structured_content.pid,
    );
    expect(again).not.toBe(pid);
  });
});
