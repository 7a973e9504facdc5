import { defineCommand } from "citty";
import { realpathSync, statSync } from "node:fs";
import { dirname, isAbsolute, relative, sep } from "node:path";
import { log } from "../core/log.ts";
import { MAX_OUTPUT_BYTES_LIMIT } from "../ssh/settings.ts";

function fail(message: string): never {
  process.stderr.write(`local-shell-mcp ssh: ${message}\n`);
  process.exit(2);
}

function numberFlag(raw: unknown, name: string, min: number, max: number, integer: boolean): number {
  const v = Number(raw);
  if (
    typeof raw !== "string" ||
    raw.trim() === "" ||
    !Number.isFinite(v) ||
    v < min ||
    v > max ||
    (integer && !Number.isInteger(v))
  ) {
    fail(`--${name} must be ${integer ? "an integer" : "a number"} from ${min} to ${max}`);
  }
  return v;
}

function inside(parent: string, child: string): boolean {
  const rel = relative(parent, child);
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel));
}

const LEVELS: Record<string, number> = { debug: 4, info: 3, warning: 2, error: 1 };

export default defineCommand({
  meta: { name: "ssh", description: "Run the Remote SSH MCP server (stdio) over the user's own OpenSSH" },
  args: {
    "local-root": {
      type: "string",
      description: "Data directory all local paths are relative to (required; never the install directory)",
    },
    "connect-timeout": { type: "string", default: "120", description: "Master startup deadline in seconds (0.1..900)" },
    "command-timeout": {
      type: "string",
      default: "120",
      description: "Default per-command deadline in seconds (0.1..86400)",
    },
    "max-output-bytes": {
      type: "string",
      default: "1048576",
      description:
        "Bytes captured per stream (1024..1572864: an answer holding both streams stays within ~9 MiB, " +
        "below the 10 MiB an MCP SDK client accepts; use spool_output for more)",
    },
    "max-transfers": { type: "string", default: "2", description: "Concurrent transfers per session (1..16)" },
    "max-sessions": { type: "string", default: "8", description: "Open sessions, including starting ones (1..32)" },
    "transfer-bwlimit": { type: "string", default: "0", description: "rsync bandwidth limit in KiB/s (0 = unlimited)" },
    "log-level": { type: "string", default: "info", description: "debug | info | warning | error (stderr)" },
  },
  async run({ args }) {
    const level = LEVELS[String(args["log-level"]).toLowerCase()];
    if (level === undefined) fail("--log-level must be one of debug, info, warning, error");
    if (!process.env.LOCAL_SHELL_MCP_LOG_LEVEL) log.level = level;
    const limits = {
      connectTimeoutS: numberFlag(args["connect-timeout"], "connect-timeout", 0.1, 900, false),
      commandTimeoutS: numberFlag(args["command-timeout"], "command-timeout", 0.1, 86_400, false),
      maxOutputBytes: numberFlag(args["max-output-bytes"], "max-output-bytes", 1024, MAX_OUTPUT_BYTES_LIMIT, true),
      maxTransfers: numberFlag(args["max-transfers"], "max-transfers", 1, 16, true),
      maxSessions: numberFlag(args["max-sessions"], "max-sessions", 1, 32, true),
      transferBwlimitKiB: numberFlag(args["transfer-bwlimit"], "transfer-bwlimit", 0, 10_000_000, true),
    };
    const rootArg = args["local-root"];
    if (typeof rootArg !== "string" || rootArg === "") fail("--local-root is required (an explicit data directory)");
    let root: string;
    try {
      root = realpathSync(rootArg);
      if (!statSync(root).isDirectory()) throw new Error("not a directory");
    } catch {
      fail("--local-root must name an existing directory");
    }
    const installDir = dirname(realpathSync(process.execPath));
    if (inside(root, installDir)) fail("--local-root must not contain the server's own install directory");
    const { LocalRoot } = await import("../ssh/localroot.ts");
    const { which } = await import("../ssh/proc.ts");
    const ssh = which("ssh");
    const rsync = which("rsync");
    const falseBin = which("false");
    if (!ssh || !rsync || !falseBin) fail("missing_dependency: ssh, rsync and false must be on PATH");
    const { openSshVersion, MIN_OPENSSH } = await import("../ssh/openssh-version.ts");
    const version = await openSshVersion(ssh);
    if (!version) fail("missing_dependency: ssh on PATH is not an OpenSSH client whose version can be read");
    if (version[0] < MIN_OPENSSH[0] || (version[0] === MIN_OPENSSH[0] && version[1] < MIN_OPENSSH[1])) {
      fail(`missing_dependency: OpenSSH ${MIN_OPENSSH.join(".")} or newer is required (found ${version.join(".")})`);
    }
    let localRoot;
    try {
      localRoot = new LocalRoot(root);
    } catch {
      fail("invalid_configuration: the local root's state directory cannot be made private");
    }
    let runner: string;
    try {
      runner = await (await import("../native/helpers.ts")).containmentRunner();
    } catch {
      fail("missing_dependency: the containment runner (lsm-runner) cannot be extracted");
    }
    const { serveSsh } = await import("../ssh/server.ts");
    await serveSsh({
      ...limits,
      localRoot,
      bin: { ssh, rsync, false: falseBin, runner },
    });
  },
});
