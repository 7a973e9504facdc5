import { defineCommand } from "citty";
import { MAX_SECRET_BYTES } from "../bridge/credentials.ts";
import { manifestPath } from "../bridge/manifest.ts";
import { checkName, fail, guarded, loadManifest, mcpArgs, mcpContext, printJson, rejectUnknown } from "./mcp-common.ts";

const own = {
  server: { type: "positional", description: "Server name from the Agent Bridge manifest", required: true },
  name: { type: "positional", description: 'Secret name (what {"secret": NAME} refers to)', required: true },
  stdin: {
    type: "boolean",
    description:
      "Read the value from stdin: piped, or typed at a terminal with echo off (required; values are never " +
      "accepted as arguments)",
  },
} as const;
const args = mcpArgs(own);

/**
 * Reads stdin up to `limit` bytes; one byte more means the value is too large. From a terminal only
 * the first line is read.
 */
async function readStdin(limit: number, oneLine: boolean): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of Bun.stdin.stream()) {
    parts.push(chunk);
    total += chunk.length;
    if (total > limit) fail(`the secret value exceeds ${MAX_SECRET_BYTES} bytes`);
    if (oneLine && chunk.includes(10)) break;
  }
  return Buffer.concat(parts);
}

/** Switches the terminal's echo; false when stty could not do it. */
function setEcho(on: boolean): boolean {
  return (
    Bun.spawnSync(["stty", on ? "echo" : "-echo"], { stdin: "inherit", stdout: "ignore", stderr: "ignore" })
      .exitCode === 0
  );
}

/** Reads one line from the terminal with echo off, so the value is never shown on screen. */
async function readHidden(label: string, limit: number): Promise<Uint8Array> {
  if (!setEcho(false)) fail("could not turn off terminal echo; pipe the value in instead");
  const restore = () => setEcho(true);
  process.once("SIGINT", () => {
    restore();
    process.stderr.write("\n");
    process.exit(130);
  });
  try {
    process.stderr.write(`Value for ${label} (input hidden): `);
    return await readStdin(limit, true);
  } finally {
    restore();
    process.stderr.write("\n");
  }
}

export default defineCommand({
  meta: { name: "set", description: "Store a secret for an upstream MCP server, reading the value from stdin" },
  args,
  async run({ args: a }) {
    rejectUnknown(a, args, 2);
    const server = checkName("SERVER", a.server);
    const name = checkName("NAME", a.name);
    if (a.stdin !== true) fail("secret values are read only from stdin: pass --stdin and pipe the value in");
    const ctx = mcpContext(a);
    // A secret for a server the manifest does not name would never be used: most likely a typo.
    if (!loadManifest(ctx).servers.has(server)) {
      fail(`no MCP server named ${server} in the Agent Bridge manifest ${manifestPath(ctx.home)}; add it there first`);
    }
    // A trailing newline (LF or CRLF) may follow the value and is dropped, so read that much more.
    const bytes = process.stdin.isTTY
      ? await readHidden(`${server}/${name}`, MAX_SECRET_BYTES + 2)
      : await readStdin(MAX_SECRET_BYTES + 2, false);
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
    if (/[\0\r\n]/.test(value))
      fail("the secret value contains a NUL or line break, which neither environments nor headers can carry");
    await guarded(async () => {
      await ctx.store.setSecret(server, name, value);
      ctx.audit.record("agent_secret_set", { server, name });
      await ctx.audit.flush();
    });
    printJson({ server, name, stored: true, home: ctx.home });
  },
});
