import { incidentError } from "../core/errors.ts";

/** A JSON response that is never cached. */
export function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "cache-control": "no-store", ...headers },
  });
}

/** The 500 answer to an unexpected failure: logged once as an incident whose id the body names. */
export function incidentResponse(cause: unknown, where: string, summary?: string): Response {
  const e = incidentError(cause, where, summary);
  return errorResponse(500, e.code, e.message, e.details ?? {});
}

/** The stable error envelope of every HTTP route we own. */
export function errorResponse(
  status: number,
  error: string,
  message: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Response {
  return jsonResponse(status, { ok: false, error, message, ...extra }, headers);
}
