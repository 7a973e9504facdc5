import { auditTail } from "./audit/audit-tail.ts";
import type { ToolDefinition } from "./define.ts";
import { version } from "./meta/version.ts";
import { sessionChangeCwd } from "./sessions/session-change-cwd.ts";
import { sessionCopy } from "./sessions/session-copy.ts";
import { sessionEnd } from "./sessions/session-end.ts";
import { sessionStart } from "./sessions/session-start.ts";
import { bash } from "./shell/bash.ts";
import { job } from "./shell/job.ts";
import {
  killPersistentShell,
  listPersistentShells,
  readPersistentShellOutput,
  resizePersistentShell,
  sendPersistentShellInput,
} from "./shell/persistent-shells.ts";
import { fileTools } from "./files/index.ts";
import { bridgeTools } from "./bridge/index.ts";
import { createFileLink } from "./links/create-file-link.ts";
import { listFileLinks } from "./links/list-file-links.ts";
import { revokeFileLink } from "./links/revoke-file-link.ts";
import { remoteAdmin } from "./remote/remote-admin.ts";

/** Every built-in tool. Capabilities add theirs here. */
export function builtinTools(): ToolDefinition[] {
  return [
    sessionStart,
    sessionChangeCwd,
    sessionEnd,
    sessionCopy,
    bash,
    version,
    auditTail,
    ...fileTools(),
    job,
    listPersistentShells,
    readPersistentShellOutput,
    sendPersistentShellInput,
    resizePersistentShell,
    killPersistentShell,
    createFileLink,
    listFileLinks,
    revokeFileLink,
    remoteAdmin,
    ...bridgeTools(),
  ] as unknown as ToolDefinition[];
}
