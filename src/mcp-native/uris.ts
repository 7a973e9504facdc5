import { ToolError } from "../core/errors.ts";
import { SESSION_ID_PATTERN } from "../sessions/ids.ts";

/**
 * Resource addresses. One scheme, one shape per kind, so a URI names exactly one thing:
 *   lsm://session/<session_id>/file/<path>        a workspace file, path relative to the workdir,
 *                                                  each segment percent-encoded
 *   lsm://session/<session_id>/todos              the session's todo list (JSON)
 *   lsm://session/<session_id>/job/<job_id>/log   the end of a job's current attempt log
 */
export type ResourceRef =
  | { kind: "file"; sid: string; path: string }
  | { kind: "todos"; sid: string }
  | { kind: "job-log"; sid: string; jobId: string };

export const SCHEME = "lsm://session/";
const JOB_ID = /^[A-Za-z0-9_-]{1,64}$/;
/** Longer than any path the file tools accept (4,200 characters), percent-encoded. */
const MAX_URI_CHARS = 16_384;

export function fileUri(sid: string, rel: string): string {
  return `${SCHEME}${sid}/file/${rel.split("/").map(encodeURIComponent).join("/")}`;
}

export const todosUri = (sid: string): string => `${SCHEME}${sid}/todos`;
export const jobLogUri = (sid: string, jobId: string): string => `${SCHEME}${sid}/job/${jobId}/log`;

function invalid(uri: string): ToolError {
  return new ToolError("resource_uri_invalid", `not a resource of this server: ${uri.slice(0, 200)}`);
}

/** Parses a URI of ours; anything else (another scheme, a malformed escape) is `resource_uri_invalid`. */
export function parseResourceUri(uri: string): ResourceRef {
  if (uri.length > MAX_URI_CHARS || !uri.startsWith(SCHEME)) throw invalid(uri);
  const rest = uri.slice(SCHEME.length);
  const slash = rest.indexOf("/");
  const sid = slash < 0 ? rest : rest.slice(0, slash);
  if (!SESSION_ID_PATTERN.test(sid) || sid.length !== 8) throw invalid(uri);
  const tail = slash < 0 ? "" : rest.slice(slash + 1);
  if (tail === "todos") return { kind: "todos", sid };
  const job = /^job\/([^/]+)\/log$/.exec(tail);
  if (job) {
    if (!JOB_ID.test(job[1]!)) throw invalid(uri);
    return { kind: "job-log", sid, jobId: job[1]! };
  }
  if (tail.startsWith("file/") && tail.length > 5) {
    let path: string;
    try {
      path = tail.slice(5).split("/").map(decodeURIComponent).join("/");
    } catch {
      throw invalid(uri);
    }
    // The file tools' own checks (containment, NUL, length) apply to the decoded path.
    return { kind: "file", sid, path };
  }
  throw invalid(uri);
}
