/**
 * Remote operations over a session's mux: exec, sudo_exec, stat, list_directory, read_file_range
 * and remote hashing. Every remote script is fixed text with shell-quoted agent values.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { type ChannelResult, encodeBytes, type Remote, runChannel, type Stream, toStream } from "./channel.ts";
import { shq } from "./proc.ts";
import type { SshSettings } from "./settings.ts";
import { privilegedScript, sudoFailure } from "./sudo.ts";

export const MAX_COMMAND_BYTES = 1_048_576;

export interface CommandInput {
  command: string;
  cwd?: string | undefined;
  timeout?: number | undefined;
  spool_output: boolean;
}

export interface CommandData {
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  duration_ms: number;
  stdout: Stream;
  stderr: Stream;
}

function validateCommand(input: CommandInput): void {
  if (input.command.trim() === "") throw new ToolError("invalid_command", "command is empty");
  if (input.command.includes("\0")) throw new ToolError("invalid_command", "command contains a NUL byte");
  if (Buffer.byteLength(input.command) > MAX_COMMAND_BYTES)
    throw new ToolError("invalid_command", `command exceeds ${MAX_COMMAND_BYTES} bytes`);
  if (input.cwd !== undefined) checkRemotePath(input.cwd);
}

function withNewline(s: string): string {
  return s.endsWith("\n") ? s : `${s}\n`;
}

function cdLine(cwd: string | undefined): string {
  return cwd === undefined ? "" : `cd -- ${shq(cwd)} || exit 125\n`;
}

/** Streams a spool file into a sibling without bytes [offset, offset+length), then renames it over. */
async function removeFromSpool(path: string, offset: number, length: number): Promise<void> {
  const { closeSync, constants, fsyncSync, openSync, readSync, renameSync, writeSync } = await import("node:fs");
  const tmp = `${path}.rewrite`;
  const src = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  const dst = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    const buf = Buffer.alloc(1 << 20);
    let pos = 0;
    for (;;) {
      const n = readSync(src, buf, 0, buf.length, pos);
      if (n === 0) break;
      const start = pos;
      const end = pos + n;
      pos = end;
      const cutFrom = Math.max(start, offset);
      const cutTo = Math.min(end, offset + length);
      if (cutFrom >= cutTo) writeSync(dst, buf, 0, n);
      else {
        if (cutFrom > start) writeSync(dst, buf, 0, cutFrom - start);
        if (end > cutTo) writeSync(dst, buf, cutTo - start, end - cutTo);
      }
    }
    fsyncSync(dst);
  } finally {
    closeSync(src);
    closeSync(dst);
  }
  renameSync(tmp, path);
}

/** exec and sudo_exec: one isolated non-PTY shell per call. */
export async function runCommand(
  session: Remote,
  settings: SshSettings,
  input: CommandInput,
  sudo: boolean,
  signal: AbortSignal,
): Promise<CommandData> {
  validateCommand(input);
  const timeoutS = input.timeout ?? settings.commandTimeoutS;
  const marker = `__LSM_SSH_SUDO_STARTED_${randomBytes(24).toString("hex")}__`;
  const body = withNewline(input.command);
  const script = sudo ? privilegedScript(input.command, input.cwd, marker, timeoutS) : `${cdLine(input.cwd)}${body}`;
  let spool: { stdout: string; stderr: string } | undefined;
  if (input.spool_output) {
    const name = randomBytes(16).toString("hex");
    const dir = settings.localRoot.spoolDir;
    spool = { stdout: join(dir, `${name}.stdout`), stderr: join(dir, `${name}.stderr`) };
  }
  session.activeCommands++;
  let r: ChannelResult;
  try {
    r = await runChannel(session.master, session.channels, {
      kind: sudo ? "sudo" : "sh",
      script,
      timeoutMs: timeoutS * 1000,
      maxBytes: settings.maxOutputBytes,
      signal,
      spool,
    });
  } finally {
    session.activeCommands--;
  }
  if (sudo) {
    const needle = Buffer.from(`${marker}\n`);
    const at = Buffer.from(r.stderr.bytes).indexOf(needle);
    if (at < 0) throw sudoFailure(r);
    const b = Buffer.from(r.stderr.bytes);
    r.stderr = {
      ...r.stderr,
      bytes: Buffer.concat([b.subarray(0, at), b.subarray(at + needle.length)]),
      total: r.stderr.total - needle.length,
    };
    if (spool) await removeFromSpool(spool.stderr, at, needle.length);
  }
  const rel = (p: string | undefined) => (p ? settings.localRoot.display(p) : null);
  return {
    exit_code: r.code,
    signal: r.timedOut ? "SIGTERM" : r.signal,
    timed_out: r.timedOut,
    duration_ms: r.durationMs,
    stdout: toStream(r.stdout, rel(spool?.stdout)),
    stderr: toStream(r.stderr, rel(spool?.stderr)),
  };
}

/** Runs a fixed inspection script, with a bounded output. */
async function inspect(
  session: Remote,
  settings: SshSettings,
  script: string,
  maxBytes: number,
  signal: AbortSignal,
): Promise<ChannelResult> {
  session.activeCommands++;
  try {
    const r = await runChannel(session.master, session.channels, {
      kind: "sh",
      script,
      timeoutMs: settings.commandTimeoutS * 1000,
      maxBytes,
      signal,
    });
    if (r.timedOut) throw new ToolError("remote_protocol_error", "the remote inspection did not finish in time");
    return r;
  } finally {
    session.activeCommands--;
  }
}

export type FileType =
  | "regular"
  | "directory"
  | "symlink"
  | "fifo"
  | "socket"
  | "block_device"
  | "char_device"
  | "unknown";

/** File type from st_mode bits (GNU %F text would call an empty file "regular empty file"). */
export function typeFromMode(mode: number): FileType {
  switch (mode & 0o170000) {
    case 0o100000:
      return "regular";
    case 0o040000:
      return "directory";
    case 0o120000:
      return "symlink";
    case 0o010000:
      return "fifo";
    case 0o140000:
      return "socket";
    case 0o060000:
      return "block_device";
    case 0o020000:
      return "char_device";
    default:
      return "unknown";
  }
}

/** Linux limits the remote side enforces anyway: reaching them there surfaced as unrelated failures. */
export const MAX_REMOTE_PATH_BYTES = 4096;
export const MAX_NAME_BYTES = 255;

/** Refuses a NUL, a path over PATH_MAX or a component over NAME_MAX (bytes) with `invalid_remote_path`. */
export function checkRemotePath(p: string): void {
  if (p.includes("\0")) throw new ToolError("invalid_remote_path", "remote path contains a NUL byte");
  if (Buffer.byteLength(p) >= MAX_REMOTE_PATH_BYTES)
    throw new ToolError("invalid_remote_path", `remote path is ${MAX_REMOTE_PATH_BYTES} bytes or longer`);
  if (p.split("/").some((c) => Buffer.byteLength(c) > MAX_NAME_BYTES)) {
    throw new ToolError("invalid_remote_path", `a remote path component is longer than ${MAX_NAME_BYTES} bytes`);
  }
}

export interface StatData {
  path: string;
  mode: number;
  permissions: string;
  size: number;
  mtime: number;
  type: FileType;
}

export async function statPath(
  session: Remote,
  settings: SshSettings,
  path: string,
  signal: AbortSignal,
): Promise<StatData> {
  checkRemotePath(path);
  const r = await inspect(
    session,
    settings,
    `LC_ALL=C exec stat -Lc '%f\t%s\t%Y' -- ${shq(path)} 2>/dev/null\n`,
    4096,
    signal,
  );
  if (r.code !== 0) throw new ToolError("remote_path_not_found", "remote path does not exist or is not accessible");
  const fields = Buffer.from(r.stdout.bytes).toString("utf8").trimEnd().split("\t");
  if (
    fields.length !== 3 ||
    !/^[0-9a-f]+$/.test(fields[0]!) ||
    !/^\d+$/.test(fields[1]!) ||
    !/^-?\d+$/.test(fields[2]!)
  ) {
    throw new ToolError("remote_protocol_error", "unexpected output from remote stat");
  }
  const mode = parseInt(fields[0]!, 16);
  return {
    path,
    mode,
    permissions: (mode & 0o7777).toString(8).padStart(4, "0"),
    size: Number(fields[1]),
    mtime: Number(fields[2]),
    type: typeFromMode(mode),
  };
}

export interface Entry {
  name: { data: string; encoding: "utf-8" | "base64" };
  type: string;
  size: number;
  mtime: number;
  permissions: string;
  link_target: { data: string; encoding: "utf-8" | "base64" } | null;
}

const TYPE_CHECK_EXITS = `m=$(LC_ALL=C stat -Lc '%f' -- "$p" 2>/dev/null) || exit 90
`;

export async function listDirectory(
  session: Remote,
  settings: SshSettings,
  path: string,
  offset: number,
  limit: number,
  signal: AbortSignal,
): Promise<{
  path: string;
  entries: Entry[];
  count: number;
  total: number;
  offset: number;
  next_offset: number | null;
}> {
  checkRemotePath(path);
  const findPath = path.startsWith("-") ? `./${path}` : path;
  const script = `p=${shq(path)}
${TYPE_CHECK_EXITS}[ $(( 0x$m & 61440 )) -eq 16384 ] || exit 91
[ -r "$p" ] && [ -x "$p" ] || exit 90
f=${shq(findPath)}
LC_ALL=C find "$f" -mindepth 1 -maxdepth 1 -printf x 2>/dev/null | wc -c
LC_ALL=C find "$f" -mindepth 1 -maxdepth 1 -printf '%f/%y/%s/%T@/%m/%l\\0' 2>/dev/null |
  LC_ALL=C sort -z -t/ -k1,1 | tail -z -n +${offset + 1} | head -z -n ${limit}
`;
  const r = await inspect(session, settings, script, settings.maxOutputBytes, signal);
  if (r.code === 90) throw new ToolError("remote_path_not_found", "remote path does not exist or is not accessible");
  if (r.code === 91) throw new ToolError("invalid_remote_type", "remote path is not a directory");
  if (r.code !== 0) throw new ToolError("remote_path_not_found", "remote directory could not be listed");
  if (r.stdout.truncated)
    throw new ToolError("output_limit_exceeded", "the listing page exceeds the output limit; use a smaller limit");
  const out = Buffer.from(r.stdout.bytes);
  const nl = out.indexOf(10);
  const totalText = out.subarray(0, nl).toString("utf8").trim();
  if (nl < 0 || !/^\d+$/.test(totalText))
    throw new ToolError("remote_protocol_error", "unexpected output from remote find");
  const total = Number(totalText);
  const entries: Entry[] = [];
  let pos = nl + 1;
  while (pos < out.length) {
    const end = out.indexOf(0, pos);
    if (end < 0) throw new ToolError("remote_protocol_error", "unexpected output from remote find");
    const rec = out.subarray(pos, end);
    pos = end + 1;
    const cuts: number[] = [];
    for (let i = 0; i < rec.length && cuts.length < 5; i++) if (rec[i] === 0x2f) cuts.push(i);
    if (cuts.length < 5) throw new ToolError("remote_protocol_error", "unexpected output from remote find");
    const field = (k: number) => rec.subarray(cuts[k - 1]! + 1, cuts[k]).toString("utf8");
    const name = encodeBytes(rec.subarray(0, cuts[0]));
    const type = field(1);
    const size = Number(field(2));
    const mtime = Number(field(3));
    const perms = field(4);
    if (!Number.isFinite(size) || !Number.isFinite(mtime) || !/^[0-7]+$/.test(perms))
      throw new ToolError("remote_protocol_error", "unexpected output from remote find");
    const linkBytes = rec.subarray(cuts[4]! + 1);
    const link = type === "l" ? encodeBytes(linkBytes) : undefined;
    entries.push({
      name: { data: name.data, encoding: name.encoding },
      type,
      size,
      mtime,
      permissions: perms.padStart(4, "0"),
      link_target: link ? { data: link.data, encoding: link.encoding } : null,
    });
  }
  const next = offset + entries.length < total && entries.length > 0 ? offset + entries.length : null;
  return { path, entries, count: entries.length, total, offset, next_offset: next };
}

export async function readRange(
  session: Remote,
  settings: SshSettings,
  path: string,
  offset: number,
  maxBytes: number,
  signal: AbortSignal,
): Promise<{
  path: string;
  offset: number;
  bytes_read: number;
  eof: boolean;
  size: number;
  data: string;
  encoding: "utf-8" | "base64";
}> {
  checkRemotePath(path);
  const script = `p=${shq(path)}
m=$(LC_ALL=C stat -Lc '%f %s' -- "$p" 2>/dev/null) || exit 90
set -- $m
[ $(( 0x$1 & 61440 )) -eq 32768 ] || exit 91
[ -r "$p" ] || exit 90
printf '%s\\n' "$2"
tail -c +${offset + 1} -- "$p" 2>/dev/null | head -c ${maxBytes + 1}
`;
  const r = await inspect(session, settings, script, maxBytes + 64, signal);
  if (r.code === 91) throw new ToolError("invalid_remote_type", "remote path is not a regular file");
  if (r.code !== 0) throw new ToolError("remote_path_not_found", "remote path does not exist or is not accessible");
  const out = Buffer.from(r.stdout.bytes);
  const nl = out.indexOf(10);
  const sizeText = nl < 0 ? "" : out.subarray(0, nl).toString("utf8");
  if (!/^\d+$/.test(sizeText)) throw new ToolError("remote_protocol_error", "unexpected output from remote read");
  const body = out.subarray(nl + 1);
  const data = body.subarray(0, maxBytes);
  const enc = encodeBytes(data);
  return {
    path,
    offset,
    bytes_read: data.length,
    eof: body.length <= maxBytes,
    size: Number(sizeText),
    data: enc.data,
    encoding: enc.encoding,
  };
}

/** SHA-256 of a remote regular file (`--zero`: otherwise GNU escapes names holding a backslash or a newline). */
export async function remoteHash(session: Remote, path: string, signal?: AbortSignal): Promise<string> {
  session.activeCommands++;
  let r: ChannelResult;
  try {
    r = await runChannel(session.master, session.channels, {
      kind: "sh",
      script: `LC_ALL=C exec sha256sum --zero -- ${shq(path)} 2>/dev/null\n`,
      timeoutMs: 24 * 3600 * 1000,
      maxBytes: 4096,
      signal,
    });
  } finally {
    session.activeCommands--;
  }
  if (r.code === 127) throw new ToolError("remote_hash_unavailable", "sha256sum is not available on the remote host");
  if (r.code !== 0) throw new ToolError("remote_hash_failed", "the remote file could not be hashed");
  const m = /^([0-9a-fA-F]{64})[ \t]/.exec(Buffer.from(r.stdout.bytes).toString("utf8"));
  if (!m) throw new ToolError("remote_protocol_error", "unexpected output from remote sha256sum");
  return m[1]!.toLowerCase();
}

/** Runs a small fixed remote script and returns its exit code (transfer prep and publish steps). */
export async function remoteScript(
  session: Remote,
  script: string,
  signal?: AbortSignal,
): Promise<{ code: number | null; stdout: string }> {
  const r = await runChannel(session.master, session.channels, {
    kind: "sh",
    script,
    timeoutMs: 120_000,
    maxBytes: 65_536,
    signal,
  });
  return { code: r.code, stdout: Buffer.from(r.stdout.bytes).toString("utf8") };
}
