/**
 * Errors as values: every failure a caller can act on carries a stable snake_case `code`.
 * Transports map codes to MCP results or HTTP statuses once, at the edge.
 */
export class ToolError extends Error {
  readonly code: string;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: string, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = "ToolError";
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: string; message: string } & Record<string, unknown> {
    return { code: this.code, message: this.message, ...(this.details ?? {}) };
  }
}

export function isToolError(value: unknown): value is ToolError {
  return value instanceof ToolError;
}

/** Turns anything thrown into a ToolError without leaking stacks or internal paths. */
export function toToolError(value: unknown): ToolError {
  if (value instanceof ToolError) return value;
  if (value instanceof Error && value.name === "AbortError") return new ToolError("cancelled", "the operation was cancelled");
  return new ToolError("internal_error", "the server hit an unexpected error; see the server log");
}
