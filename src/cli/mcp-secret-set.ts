import { defineCommand } from "citty";
import { MAX_SECRET_BYTES } from "../bridge/credentials.ts";
import { checkName, fail, guarded, loadManifest, mcpArgs, mcpContext, printJson, rejectUnknown } from "./mcp-common.ts";

const own = {
  server: { type: "positional", description: "Server name from the Agent Bridge manifest", required: true },
  name: { type: "positional", description: "Secret name (what {\"secret\": NAME} refers to)", required: true },
  stdin: { type: "boolean", description: "Read the value from stdin (required; values are never accepted as arguments)" },
} as const;
const args = mcpArgs(own);

/** Reads stdin up to `limit` bytes; one byte more means the value is too large. */
async function readStdin(limit: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of Bun.stdin.stream()) {
    parts.push(chunk);
    total += chunk.length;
    if (total > limit) fail(`the secret value exceeds ${MAX_SECRET_BYTES} bytes`);
  }
  return Buffer.concat(parts);
}

export default defineCommand({
  meta: { name: "set", description: "Store a secret for an upstream MCP server, reading the value from stdin" },
  args,
  async run({ args: a }) {
    rejectUnknown(a, args, 2);
    const server = checkName("SERVER", a.server);
    const name = checkName("NAME", a.name);
    if (a.stdin !== true) fail("secret values are read only from stdin: pass --stdin and pipe the value in");
    if (process.stdin.isTTY) fail("stdin is a terminal; pipe the value in (for example from a password manager)");
    const ctx = mcpContext(a);
    if (!loadManifest(ctx.settings).servers.has(server)) fail(`no MCP server named ${server} in the Agent Bridge manifest`);
    // A trailing newline (LF or CRLF) may follow the value and is dropped, so read that much more.
    const bytes = await readStdin(MAX_SECRET_BYTES + 2);
    let value: string;
    try {
      value = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      fail("the secret value is not valid UTF-8");
    }
    if (value.endsWith("\r\n")) value = value.slice(0, -2);
    else if (value.endsWith("\n")) value = value.slice(0, -1);
    if (value.length === 0) fail("the secret value is empty");
    if (Buffer.byteLength(value) > MAX_SECRET_BYTES) fail(`the secret value exceeds ${MAX_SECRET_BYTES} bytes`);
    if (/[\0\r\n]/.test(value)) fail("the secret value contains a NUL or line break, which neither environments nor headers can carry");
    await guarded(async () => {
      await ctx.store.setSecret(server, name, value);
      ctx.audit.record("agent_secret_set", { server, name });
      await ctx.audit.flush();
    });
    printJson({ server, name, stored: true });
  },
});
