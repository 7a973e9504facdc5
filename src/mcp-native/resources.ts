import { closeSync, fstatSync } from "node:fs";
import { extname, relative, sep } from "node:path";
import { ToolError } from "../core/errors.ts";
import { assertRegular, readAll } from "../fs/read.ts";
import { openChecked, resolveInWorkdir } from "../fs/resolve.ts";
import { walk } from "../fs/walk.ts";
import type { SessionRecord } from "../sessions/store.ts";
import { type Caller, deniedPath, filePolicy, ownedSession, ownedSessions, requireScope } from "./access.ts";
import { fileUri, jobLogUri, parseResourceUri, SCHEME, todosUri } from "./uris.ts";

/** Resources per resources/list page. */
export const PAGE_SIZE = 100;
/** Files listed per session at most; a deeper tree is reached through the path template. */
export const MAX_FILES_PER_SESSION = 5_000;
/** Lines of a job log a read returns at most (its bytes are bounded by max_file_read_bytes). */
const JOB_LOG_LINES = 10_000;

export interface ResourceEntry {
  uri: string;
  name: string;
  title?: string;
  mimeType?: string;
  size?: number;
}

export type ResourceContents =
  | { uri: string; mimeType: string; text: string }
  | { uri: string; mimeType: string; blob: string };

export const RESOURCE_TEMPLATES = [
  {
    uriTemplate: `${SCHEME}{session_id}/file/{+path}`,
    name: "session-file",
    title: "Workspace file of a session",
    description:
      "A file inside the session's workdir, path relative to the workdir. Read with the read tool's " +
      "containment and size limit; binary files come as blobs.",
  },
  {
    uriTemplate: `${SCHEME}{session_id}/todos`,
    name: "session-todos",
    title: "Todo list of a session",
    description: "The session's todo list as JSON (what read_todos returns).",
    mimeType: "application/json",
  },
  {
    uriTemplate: `${SCHEME}{session_id}/job/{job_id}/log`,
    name: "job-log",
    title: "Log of a background job",
    description: "The end of the job's current attempt log, bounded like the job tool's output.",
    mimeType: "text/plain",
  },
];

/** Where the next page starts: a session and how many of its entries were already sent. */
interface Cursor {
  sid: string;
  skip: number;
}

function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify(c)).toString("base64url");
}

function decodeCursor(raw: string): Cursor {
  try {
    if (raw.length > 200) throw new Error("long");
    const v = JSON.parse(Buffer.from(raw, "base64url").toString("utf8")) as unknown;
    if (
      v &&
      typeof v === "object" &&
      typeof (v as Cursor).sid === "string" &&
      Number.isSafeInteger((v as Cursor).skip) &&
      (v as Cursor).skip >= 0
    ) {
      return { sid: (v as Cursor).sid, skip: (v as Cursor).skip };
    }
  } catch {
    // Falls through to the typed error.
  }
  throw new ToolError("invalid_cursor", "the cursor is not one this server gave out; list again without a cursor");
}

const TEXT_TYPES: Record<string, string> = {
  ".md": "text/markdown",
  ".json": "application/json",
  ".html": "text/html",
  ".css": "text/css",
  ".js": "text/javascript",
  ".ts": "text/x-typescript",
  ".py": "text/x-python",
  ".sh": "text/x-shellscript",
  ".yml": "application/yaml",
  ".yaml": "application/yaml",
  ".xml": "application/xml",
  ".csv": "text/csv",
};
const BINARY_TYPES: Record<string, string> = {
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
  ".pdf": "application/pdf",
  ".zip": "application/zip",
  ".gz": "application/gzip",
};

/**
 * The entries of one session in list order: todos, job logs (newest first), then files depth-first by
 * name, skipping the ignored folders the file tools skip. The walk stops once `limit` entries are
 * known, so a page never costs more than the entries before it plus one page.
 */
async function sessionEntries(caller: Caller, session: SessionRecord, limit: number): Promise<ResourceEntry[]> {
  const sid = session.session_id;
  const label = session.label ? ` (${session.label})` : "";
  const out: ResourceEntry[] = [
    {
      uri: todosUri(sid),
      name: `todos of ${sid}`,
      title: `Todos of session ${sid}${label}`,
      mimeType: "application/json",
    },
  ];
  const rows = caller.app.jobs
    .readRows()
    .filter((r) => r.session_id === sid)
    .sort((a, b) => b.created_at - a.created_at);
  for (const r of rows) {
    if (out.length >= limit) return out;
    out.push({
      uri: jobLogUri(sid, r.job_id),
      name: `${r.job_id} log`,
      title: `Log of ${r.name ?? r.job_id}`,
      mimeType: "text/plain",
    });
  }
  let files = 0;
  const policy = filePolicy(caller.app, session);
  walk(
    session.workdir,
    {
      gitignore: true,
      hidden: true,
      skipIgnored: true,
      maxDepth: 64,
      exclude: caller.app.files.stateDir,
      workspaceRoot: caller.app.workspaceRoot,
    },
    (e) => {
      if (out.length >= limit || files >= MAX_FILES_PER_SESSION) return false;
      // What the file tools would refuse to read is not offered (a denied folder is not entered).
      if (deniedPath(policy, e.abs)) return "skip";
      // Symlinks are not listed: reading one resolves it under the same containment as any path.
      if (!e.dirent.isFile()) return;
      files++;
      out.push({ uri: fileUri(sid, e.rel), name: e.rel, mimeType: mimeFor(e.rel, undefined) });
    },
  );
  return out;
}

function mimeFor(path: string, binary: boolean | undefined): string {
  const ext = extname(path).toLowerCase();
  if (binary !== true && TEXT_TYPES[ext]) return TEXT_TYPES[ext]!;
  if (binary !== false && BINARY_TYPES[ext]) return BINARY_TYPES[ext]!;
  return binary ? "application/octet-stream" : "text/plain";
}

/** resources/list: the caller's sessions in id order, PAGE_SIZE entries a page. */
export async function listResources(
  caller: Caller,
  cursor: string | undefined,
): Promise<{ resources: ResourceEntry[]; nextCursor?: string }> {
  requireScope(caller, "shell:read");
  const start = cursor === undefined ? undefined : decodeCursor(cursor);
  const sessions = ownedSessions(caller).filter((s) => !start || s.session_id >= start.sid);
  const resources: ResourceEntry[] = [];
  for (const s of sessions) {
    const skip = start && s.session_id === start.sid ? start.skip : 0;
    const want = PAGE_SIZE - resources.length;
    const entries = await sessionEntries(caller, s, skip + want + 1);
    const page = entries.slice(skip, skip + want);
    resources.push(...page);
    if (entries.length > skip + want)
      return { resources, nextCursor: encodeCursor({ sid: s.session_id, skip: skip + want }) };
    if (resources.length >= PAGE_SIZE) {
      const next = sessions[sessions.indexOf(s) + 1];
      return next ? { resources, nextCursor: encodeCursor({ sid: next.session_id, skip: 0 }) } : { resources };
    }
  }
  return { resources };
}

/** Reads a whole file of the workdir, refusing one over max_file_read_bytes (no silent truncation). */
function readFile(caller: Caller, session: SessionRecord, uri: string, path: string): ResourceContents {
  const policy = filePolicy(caller.app, session);
  const res = resolveInWorkdir(policy, path, { mustExist: true });
  const fd = openChecked(policy, res.real, path);
  try {
    const st = fstatSync(fd);
    if (st.isDirectory())
      throw new ToolError("is_a_directory", `a directory is not a resource; read its files: ${path}`);
    assertRegular(st, path);
    const max = caller.app.settings.max_file_read_bytes;
    if (st.size > max)
      throw new ToolError("file_too_large", `Refusing to read ${st.size} bytes as a resource; max is ${max}`, {
        bytes: st.size,
        max,
      });
    const bytes = readAll(fd, st.size);
    const text = utf8Text(bytes);
    const shown = relative(session.workdir, res.real).split(sep).join("/");
    if (text !== undefined) return { uri, mimeType: mimeFor(shown, false), text };
    return { uri, mimeType: mimeFor(shown, true), blob: bytes.toString("base64") };
  } finally {
    closeSync(fd);
  }
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/** The text of bytes that are valid UTF-8 without NUL; undefined for anything binary. */
function utf8Text(bytes: Uint8Array): string | undefined {
  if (bytes.includes(0)) return undefined;
  try {
    return decoder.decode(bytes);
  } catch {
    return undefined;
  }
}

/** resources/read for one URI of ours. `readTodos` runs the read_todos tool (its audit and schema). */
export async function readResource(
  caller: Caller,
  uri: string,
  readTodos: (sid: string) => Promise<unknown>,
): Promise<{ contents: ResourceContents[] }> {
  requireScope(caller, "shell:read");
  const ref = parseResourceUri(uri);
  const session = ownedSession(caller, ref.sid);
  if (ref.kind === "file") return { contents: [readFile(caller, session, uri, ref.path)] };
  if (ref.kind === "todos")
    return {
      contents: [{ uri, mimeType: "application/json", text: JSON.stringify(await readTodos(ref.sid), null, 2) }],
    };
  const job = (await caller.app.jobs.reconcile(ref.sid)).find((j) => j.job_id === ref.jobId);
  if (!job) throw new ToolError("job_not_found", `job not found in session: ${ref.jobId}`, { job_id: ref.jobId });
  const slice = caller.app.jobs.output(job, JOB_LOG_LINES, caller.app.settings.max_file_read_bytes);
  const note = slice.truncated ? "[earlier output not shown; the job tool reads it with an offset]\n" : "";
  return { contents: [{ uri, mimeType: "text/plain", text: note + slice.text }] };
}
