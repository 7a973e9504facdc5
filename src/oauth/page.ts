/** The operator's approval page: every reflected value escaped, no scripts, no framing, no caching. */

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"'`]/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Security headers of every page the authorization server renders. */
export function pageHeaders(formTarget?: string): Record<string, string> {
  const formAction = ["'self'", ...(formTarget ? [formTarget] : [])].join(" ");
  return {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
    pragma: "no-cache",
    "content-security-policy":
      `default-src 'none'; style-src 'unsafe-inline'; form-action ${formAction}; frame-ancestors 'none'; ` +
      `base-uri 'none'`,
    "x-frame-options": "DENY",
    // Not no-referrer: under it browsers send `Origin: null` with the approval form's POST, which
    // the Origin guard must refuse. same-origin sends our own origin to ourselves and nothing with
    // the redirect to the client.
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
  };
}

const STYLE = [
  "body{font:15px/1.45 system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;color:#1b1f24}",
  "dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}" +
    "dt{font-weight:600}dd{margin:0;word-break:break-all}",
  ".err{color:#b00020;font-weight:600}.warn{background:#fff4d6;padding:.6rem;border-radius:6px}",
  "input[type=password]{font-size:1rem;padding:.3rem;width:14rem}" +
    "button{font-size:1rem;padding:.35rem 1rem;margin-right:.5rem}",
].join("\n");

const HEAD = '<meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">';

function layout(title: string, body: string): string {
  return (
    `<!doctype html><html lang="en"><head>${HEAD}<title>${escapeHtml(title)}</title><style>${STYLE}</style>` +
    `</head><body>${body}</body></html>`
  );
}

/** A page that only reports a problem (the request cannot be approved). */
export function errorPage(message: string): string {
  return layout(
    "Authorization request rejected",
    `<h1>Authorization request rejected</h1><p class="err">${escapeHtml(message)}</p><p>Start the ` +
      `connection again from your MCP client.</p>`,
  );
}

export interface ApprovalView {
  action: string;
  clientName: string | null;
  clientId: string;
  redirectUri: string;
  resource: string;
  scopes: string[];
  params: Record<string, string>;
  pinConfigured: boolean;
  error?: string;
}

const WARNING =
  "Only approve this request if you initiated this connection. An approved client can run commands on this machine.";
const BUTTONS =
  '<button type="submit" name="decision" value="approve">Approve</button>' +
  '<button type="submit" name="decision" value="deny">Deny</button>';

/** The approval form: shows who asks for what, takes the admin PIN, offers Approve and Deny. */
export function approvalPage(v: ApprovalView): string {
  const hidden = Object.entries(v.params)
    .map(([k, val]) => `<input type="hidden" name="${escapeHtml(k)}" value="${escapeHtml(val)}">`)
    .join("");
  const hint = v.pinConfigured
    ? "Enter LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN to approve this connector."
    : "No admin PIN is configured. Set LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN before OAuth approval can continue.";
  return layout(
    "Authorize local-shell-mcp",
    `<h1>Authorize local-shell-mcp</h1>
<p class="warn">${WARNING}</p>
${v.error ? `<p class="err">${escapeHtml(v.error)}</p>` : ""}
<dl><dt>Client</dt><dd>${escapeHtml(v.clientName ?? "Unknown client")}</dd>
<dt>Client id</dt><dd>${escapeHtml(v.clientId)}</dd>
<dt>Redirect URI</dt><dd>${escapeHtml(v.redirectUri)}</dd>
<dt>Resource</dt><dd>${escapeHtml(v.resource)}</dd>
<dt>Scopes</dt><dd>${v.scopes.map(escapeHtml).join(" ")}</dd></dl>
<form method="post" action="${escapeHtml(v.action)}">${hidden}
<p>${escapeHtml(hint)}</p>
<p><label>Admin PIN <input type="password" name="pin" autocomplete="one-time-code"></label></p>
<p>${BUTTONS}</p>
</form>`,
  );
}
