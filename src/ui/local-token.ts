import { closeSync, constants, fstatSync, openSync, readSync, renameSync, rmSync, writeSync } from "node:fs";
import { timingSafeEqual } from "node:crypto";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { isLoopbackName } from "../core/loopback.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import type { Principal } from "../tools/context.ts";

/**
 * The loopback token: how a native client on this machine (the `tui` command) reaches `/api/ui` and
 * the terminal socket without a browser sign-in. A fresh value is written to
 * `<state_dir>/ui/local-token` (0600, in a 0700 dir) on every `serve` start, so a copy taken earlier
 * stops working at the next restart. It is accepted only in its own header, only from a loopback
 * peer, and only without an `Origin` header: browsers always send Origin on the requests that matter
 * (and cannot read the file), so a web page can never use it.
 */

export const LOCAL_TOKEN_HEADER = "x-local-shell-mcp-ui-token";
/** The environment variable a launched TUI command receives the token in (never argv). */
export const LOCAL_TOKEN_ENV = "LOCAL_SHELL_MCP_UI_LOCAL_TOKEN";
/** What the holder may do: read everything the UI shows, type into shells, cancel jobs, end sessions. */
export const LOCAL_TOKEN_SCOPES = ["shell:read", "shell:execute", "audit:read"] as const;
const MIN_LENGTH = 32;
const MAX_LENGTH = 256;

export function localTokenPath(stateDir: string): string {
  return join(stateDir, "ui", "local-token");
}

/**
 * Writes a new random token (replacing any previous one) and returns it: a private temp file
 * (O_EXCL, 0600, no-follow) renamed over the old one, so readers see one token or the other. No
 * fsync: the value only matters while this process runs, and a start-up must not wait on the disk.
 */
export function rotateLocalToken(stateDir: string): string {
  ensurePrivateDir(join(stateDir, "ui"));
  const token = Buffer.from(crypto.getRandomValues(new Uint8Array(48))).toString("base64url");
  const path = localTokenPath(stateDir);
  const tmp = `${path}.tmp-${process.pid}`;
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, `${token}\n`);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  return token;
}

/**
 * Reads the token for a client. Refuses a file that others could read or that belongs to someone
 * else: a token anybody can read proves nothing about who presents it.
 */
export function readLocalToken(stateDir: string): string {
  const path = localTokenPath(stateDir);
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    throw new ToolError(
      "ui_token_missing",
      `no loopback token at ${path}; is \`local-shell-mcp serve\` running with this state_dir?`,
    );
  }
  try {
    const st = fstatSync(fd);
    if (
      !st.isFile() ||
      (st.mode & 0o077) !== 0 ||
      (typeof process.getuid === "function" && st.uid !== process.getuid())
    ) {
      throw new ToolError("ui_token_unsafe", `${path} must be a regular file owned by you with mode 0600`);
    }
    const buf = Buffer.alloc(MAX_LENGTH + 2);
    const n = readSync(fd, buf, 0, buf.length, 0);
    const token = buf.subarray(0, n).toString("utf8").trim();
    if (token.length < MIN_LENGTH || token.length > MAX_LENGTH || !/^[A-Za-z0-9_-]+$/.test(token))
      throw new ToolError("ui_token_invalid", `${path} does not hold a valid token; restart the server`);
    return token;
  } finally {
    closeSync(fd);
  }
}

function equalText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  if (x.length !== y.length) return false;
  return timingSafeEqual(x, y);
}

export type LocalTokenVerdict =
  | { ok: true; principal: Principal }
  | { ok: false; status: 401 | 403; code: string; message: string };

/** Checks a request that carries the token header; `peer` is the transport address (never a forwarded header). */
export function checkLocalToken(expected: string, req: Request, peer: string): LocalTokenVerdict {
  if (req.headers.get("origin") !== null)
    return {
      ok: false,
      status: 403,
      code: "local_token_refused",
      message: "the loopback token is not accepted from a browser (Origin present)",
    };
  if (!isLoopbackName(peer.replace(/^::ffff:/, "")))
    return {
      ok: false,
      status: 403,
      code: "local_token_refused",
      message: "the loopback token is only accepted from this machine's loopback interface",
    };
  if (!equalText(req.headers.get(LOCAL_TOKEN_HEADER) ?? "", expected))
    return {
      ok: false,
      status: 401,
      code: "invalid_token",
      message: "wrong loopback token; it is rotated on every server start",
    };
  return {
    ok: true,
    principal: { clientId: "local-token", subject: "local-operator", scopes: [...LOCAL_TOKEN_SCOPES], operator: true },
  };
}
