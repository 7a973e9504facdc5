/**
 * A real OAuth client (oauth4webapi) driving our authorization server the way an MCP connector
 * does: protected-resource discovery, authorization-server discovery, dynamic registration, the
 * approval form (the test types the PIN), code exchange with PKCE and the RFC 8707 resource.
 */
import * as oauth from "oauth4webapi";

const insecure = { [oauth.allowInsecureRequests]: true } as const;
export const REDIRECT_URI = "http://127.0.0.1:9/callback";

export interface Discovery {
  resource: string;
  as: oauth.AuthorizationServer;
}

/** 401 challenge → RFC 9728 metadata → RFC 8414 metadata. */
export async function discover(base: string): Promise<Discovery> {
  const challenge = await fetch(`${base}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
  });
  if (challenge.status !== 401) throw new Error(`expected 401 from /mcp, got ${challenge.status}`);
  const header = challenge.headers.get("www-authenticate") ?? "";
  const metadataUrl = /resource_metadata="([^"]+)"/.exec(header)?.[1];
  if (!metadataUrl) throw new Error(`no resource_metadata in ${header}`);
  const resource = `${base}/mcp`;
  const prm = await oauth.processResourceDiscoveryResponse(
    new URL(resource),
    await oauth.resourceDiscoveryRequest(new URL(resource), insecure),
  );
  const issuer = new URL(prm.authorization_servers![0]!);
  const as = await oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
  );
  return { resource: prm.resource, as };
}

export async function register(
  d: Discovery,
  redirectUri = REDIRECT_URI,
  name = `lsm e2e client ${crypto.randomUUID().slice(0, 8)}`,
): Promise<oauth.Client> {
  const res = await oauth.dynamicClientRegistrationRequest(
    d.as,
    { redirect_uris: [redirectUri], client_name: name, token_endpoint_auth_method: "none" },
    insecure,
  );
  return (await oauth.processDynamicClientRegistrationResponse(res)) as oauth.Client;
}

export interface AuthorizeRequest {
  params: Record<string, string>;
  verifier: string;
  state: string;
}

/** Authorization request parameters with a fresh S256 PKCE pair and state. */
export async function authorizeRequest(
  d: Discovery,
  client: oauth.Client,
  extra: Record<string, string | null> = {},
): Promise<AuthorizeRequest> {
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const params: Record<string, string> = {
    response_type: "code",
    client_id: client.client_id,
    redirect_uri: (client.redirect_uris as string[])[0]!,
    resource: d.resource,
    scope: "shell:read shell:execute audit:read",
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: "S256",
  };
  for (const [k, v] of Object.entries(extra)) {
    if (v === null) delete params[k];
    else params[k] = v;
  }
  return { params, verifier, state };
}

/** GETs the approval page (as a browser would) and returns it. */
export async function approvalPage(d: Discovery, req: AuthorizeRequest): Promise<Response> {
  const url = new URL(d.as.authorization_endpoint!);
  for (const [k, v] of Object.entries(req.params)) url.searchParams.set(k, v);
  return fetch(url, { redirect: "manual" });
}

/** Posts the approval form with `pin` (and `decision`), without following the redirect. */
export async function submitApproval(
  d: Discovery,
  req: AuthorizeRequest,
  pin: string,
  decision = "approve",
): Promise<Response> {
  const form = new URLSearchParams({ ...req.params, pin, decision });
  return fetch(d.as.authorization_endpoint!, {
    method: "POST",
    body: form,
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
}

/** Raw token request (for negative cases) with the given overrides. */
export async function tokenRequest(d: Discovery, fields: Record<string, string>): Promise<Response> {
  return fetch(d.as.token_endpoint!, {
    method: "POST",
    body: new URLSearchParams(fields),
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
}

/** The callback parameters validated by the client library (state, iss). */
export function callbackParams(d: Discovery, client: oauth.Client, location: string, state: string): URLSearchParams {
  return oauth.validateAuthResponse(d.as, client, new URL(location), state);
}

/** Exchanges the code with the library; `resource` goes along as RFC 8707 requires. */
export async function exchange(
  d: Discovery,
  client: oauth.Client,
  params: URLSearchParams,
  req: AuthorizeRequest,
): Promise<oauth.TokenEndpointResponse> {
  const res = await oauth.authorizationCodeGrantRequest(
    d.as,
    client,
    oauth.None(),
    params,
    req.params.redirect_uri!,
    req.verifier,
    {
      additionalParameters: { resource: d.resource },
      ...insecure,
    },
  );
  return oauth.processAuthorizationCodeResponse(d.as, client, res);
}

/** The whole flow: returns the token response, the client and the discovery it used. */
export async function obtainTokens(
  base: string,
  pin: string,
  scope?: string,
): Promise<{ tokens: oauth.TokenEndpointResponse; client: oauth.Client; d: Discovery }> {
  const d = await discover(base);
  const client = await register(d);
  const req = await authorizeRequest(d, client, scope === undefined ? {} : { scope });
  const res = await submitApproval(d, req, pin);
  if (res.status !== 302) throw new Error(`approval failed: ${res.status} ${await res.text()}`);
  const params = callbackParams(d, client, res.headers.get("location")!, req.state);
  return { tokens: await exchange(d, client, params, req), client, d };
}

/** The whole flow: returns an access token with the requested scopes. */
export async function obtainToken(
  base: string,
  pin: string,
  scope?: string,
): Promise<{ token: string; clientId: string; d: Discovery }> {
  const { tokens, client, d } = await obtainTokens(base, pin, scope);
  return { token: tokens.access_token, clientId: client.client_id, d };
}

/** grant_type=refresh_token through the client library (RFC 8707 resource included). */
export async function refreshTokens(
  d: Discovery,
  client: oauth.Client,
  refreshToken: string,
): Promise<oauth.TokenEndpointResponse> {
  const res = await oauth.refreshTokenGrantRequest(d.as, client, oauth.None(), refreshToken, {
    additionalParameters: { resource: d.resource },
    ...insecure,
  });
  return oauth.processRefreshTokenResponse(d.as, client, res);
}

/** RFC 7009 revocation through the client library. */
export async function revokeToken(d: Discovery, client: oauth.Client, token: string): Promise<void> {
  const res = await oauth.revocationRequest(d.as, client, oauth.None(), token, insecure);
  await oauth.processRevocationResponse(res);
}
