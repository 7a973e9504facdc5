import type { Settings } from "../config/schema.ts";
import type { Capabilities } from "../sessions/orientation.ts";
import { CredentialStore } from "./credentials.ts";
import { bridgeHome } from "./home.ts";
import { ManifestSource } from "./manifest.ts";

/**
 * Makes the Agent Bridge fields of the orientation capabilities live: read on every session
 * response from the (cached) manifest and store. Counts only, never server names; an unreadable
 * manifest or store counts as nothing configured or authorized.
 */
export function liveBridgeCapabilities(capabilities: Capabilities, settings: Settings): void {
  // Resolved on first use: the bridge home may move files, which a server that never asks should not do.
  let parts: { manifest: ManifestSource; store: CredentialStore } | undefined;
  const open = () => {
    if (!parts) {
      const dir = bridgeHome(settings).dir;
      parts = { manifest: new ManifestSource(dir), store: new CredentialStore(dir) };
    }
    return parts;
  };
  const oauthServers = () => {
    if (!settings.agent_bridge_enabled) return [];
    const load = open().manifest.current();
    return load.manifest
      ? [...load.manifest.servers.values()].filter((s) => s.enabled && s.auth.mode === "oauth").map((s) => s.name)
      : [];
  };
  Object.defineProperties(capabilities, {
    agent_bridge: { enumerable: true, get: () => settings.agent_bridge_enabled },
    oauth_configured_mcp_servers: { enumerable: true, get: () => oauthServers().length },
    oauth_authorized_mcp_servers: {
      enumerable: true,
      get: () => {
        try {
          const servers = open().store.read().servers;
          return oauthServers().filter(
            (n) =>
              typeof (servers[n]?.oauth?.tokens as { access_token?: unknown } | undefined)?.access_token === "string",
          ).length;
        } catch {
          return 0;
        }
      },
    },
  });
}
