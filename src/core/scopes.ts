/** OAuth scopes a token can carry; each tool declares the ones it needs. */
export const SCOPES = [
  "shell:read",
  "shell:write",
  "shell:execute",
  "git:write",
  "file:share",
  "remote:use",
  "audit:read",
  "audit:full",
] as const;
export type Scope = (typeof SCOPES)[number];
