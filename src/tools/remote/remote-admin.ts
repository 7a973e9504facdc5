import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import type { RemoteAdmin } from "./admin.ts";
import type { ToolContext } from "../context.ts";
import { defineTool } from "../define.ts";
import description from "./remote-admin.md" with { type: "text" };

const ACTIONS = ["invite", "list", "revoke", "rename", "reconnect_command"] as const;

/** Each argument single-quoted for a POSIX shell. */
function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'"'"'`)}'`;
}

function manager(ctx: ToolContext): RemoteAdmin {
  if (!ctx.app.remote) throw new ToolError("remote_disabled", "remote workers are disabled on this server");
  return ctx.app.remote;
}

function text(args: Record<string, unknown>, key: string, required: true): string;
function text(args: Record<string, unknown>, key: string, required: false): string | null;
function text(args: Record<string, unknown>, key: string, required: boolean): string | null {
  const v = args[key];
  if (v === undefined || v === null || v === "") {
    if (required) throw new ToolError("invalid_arguments", `args.${key} is required`);
    return null;
  }
  if (typeof v !== "string" || v.length > 4096)
    throw new ToolError("invalid_arguments", `args.${key} must be a string of at most 4096 characters`);
  return v;
}

/** `<launcher> <profile_id>` when the worker reported both and they are well-formed, else null. */
export function reconnectCommand(info: Record<string, unknown>): { profile_id: string; command: string } | null {
  const profile = info.profile_id;
  const launcher = info.launcher_path;
  if (typeof profile !== "string" || !/^p_[A-Za-z0-9_-]{8,64}$/.test(profile)) return null;
  if (
    typeof launcher !== "string" ||
    !launcher.startsWith("/") ||
    Buffer.byteLength(launcher) > 4096 ||
    /[\u0000-\u001f\u007f]/.test(launcher)
  )
    return null;
  return { profile_id: profile, command: `${shellQuote(launcher)} ${shellQuote(profile)}` };
}

async function invite(ctx: ToolContext, args: Record<string, unknown>) {
  const m = manager(ctx);
  const name = text(args, "name", false);
  const workdir = text(args, "workdir", false);
  const ttlRaw = args.ttl_s;
  if (ttlRaw !== undefined && ttlRaw !== null && (typeof ttlRaw !== "number" || !Number.isFinite(ttlRaw)))
    throw new ToolError("invalid_arguments", "args.ttl_s must be a number");
  const ttl = typeof ttlRaw === "number" && ttlRaw > 0 ? ttlRaw : ctx.app.settings.remote_invite_ttl_s;
  const created = await m.store.createInvite({ name, workdir, ttlS: ttl });
  const joinUrl = `${m.publicOrigin()}/join`;
  const parts = [
    "--invite",
    created.code,
    ...(name ? ["--name", name] : []),
    ...(workdir ? ["--workdir", workdir] : []),
  ];
  const command = `curl -fsSL ${shellQuote(joinUrl)} | bash -s -- ${parts.map(shellQuote).join(" ")}`;
  return {
    code: created.code,
    name,
    workdir,
    expires_at: created.expires_at,
    ttl_s: created.ttl_s,
    join_url: joinUrl,
    command,
  };
}

function list(ctx: ToolContext) {
  const m = manager(ctx);
  const now = Date.now() / 1000;
  // A silent link is dropped after two unanswered pings, i.e. within three heartbeat intervals.
  const offlineAfter = 3 * m.heartbeatS;
  const machines = m.store.workers().map((w) => {
    const online = m.online(w.name);
    const lastSeen = online ? now : w.last_seen;
    const rc = reconnectCommand(w.info);
    return {
      name: w.name,
      status: online ? "online" : "offline",
      workdir: w.workdir,
      profile_id: rc?.profile_id ?? null,
      reconnect_command: rc?.command ?? null,
      last_seen: lastSeen,
      last_seen_age_s: lastSeen === null ? null : Math.max(0, Math.round(now - lastSeen)),
      offline_after_s: offlineAfter,
      queue_depth: m.queueDepth(w.name),
      capabilities: [...w.capabilities],
      info: { ...w.info },
    };
  });
  machines.sort((a, b) => (a.status === b.status ? a.name.localeCompare(b.name) : a.status === "online" ? -1 : 1));
  const online = machines.filter((x) => x.status === "online").length;
  return { machines, counts: { online, offline: machines.length - online, total: machines.length } };
}

export const remoteAdmin = defineTool({
  name: "remote_admin",
  title: "Manage remote workers",
  description,
  scopes: ["remote:use"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  availableWhen: { settings: ["remote_enabled"], modes: ["mcp"] },
  input: z.object({
    action: z.enum(ACTIONS),
    args: z.record(z.string(), z.unknown()),
  }),
  output: z.object({ action: z.string(), data: z.record(z.string(), z.unknown()) }),
  async run(ctx, input) {
    const m = manager(ctx);
    switch (input.action) {
      case "invite":
        return { action: input.action, data: await invite(ctx, input.args) };
      case "list":
        return { action: input.action, data: list(ctx) };
      case "revoke": {
        const machine = text(input.args, "machine", true);
        await m.store.revoke(machine);
        m.revoke(machine);
        return { action: input.action, data: { machine, revoked: true } };
      }
      case "rename": {
        const machine = text(input.args, "machine", true);
        const next = text(input.args, "new_name", true).trim();
        await m.store.rename(machine, next);
        m.rename(machine, next);
        // Sessions on that machine follow it.
        for (const rec of ctx.app.sessions.list())
          if (rec.target === "remote" && rec.machine === machine) ctx.app.sessions.update(rec, { machine: next });
        return { action: input.action, data: { old_name: machine, new_name: next } };
      }
      case "reconnect_command": {
        const machine = text(input.args, "machine", true);
        const w = m.store.byName(machine);
        if (!w)
          throw new ToolError("remote_machine_not_found", `no enrolled worker is named ${JSON.stringify(machine)}`);
        const rc = reconnectCommand(w.info);
        if (!rc)
          throw new ToolError(
            "remote_reconnect_unavailable",
            `worker ${machine} did not report a launcher and profile; run its worker connect command again ` +
              `on that host`,
          );
        return { action: input.action, data: { machine, ...rc } };
      }
    }
  },
  text: (o) => {
    const d = o.data as Record<string, unknown>;
    if (o.action === "invite") return `run on the worker host (expires in ${d.ttl_s}s, one use):\n${d.command}`;
    if (o.action === "list") {
      const ms = (d.machines as Array<Record<string, unknown>>) ?? [];
      return ms.length === 0
        ? "no workers enrolled"
        : ms
            .map((x) => `${x.name}: ${x.status} ${x.workdir}${x.queue_depth ? ` (${x.queue_depth} calls)` : ""}`)
            .join("\n");
    }
    return JSON.stringify(d);
  },
});
