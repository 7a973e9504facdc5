/**
 * The guarantees scripts/mutants.ts checks the suite for: each with the promise (and where it is
 * made), the test files that must catch a break, and one or more mutants, each a small deliberate
 * bug given as search/replace edits on sources. An anchor (`find`) must occur exactly `count` times
 * (default 1); keep it short and distinctive so unrelated edits leave it alone. docs/testing.md says
 * how to add one.
 */

export interface Edit {
  file: string;
  find: string;
  replace: string;
  count?: number;
}

export interface Mutant {
  name: string;
  /** The bug, in words. */
  what: string;
  edits: Edit[];
}

export interface Guarantee {
  name: string;
  /** The promise, and where it is made. */
  promise: string;
  /** Test files (relative to the repository) that must fail when any of the mutants is applied. */
  tests: string[];
  /** Optional `bun test -t` pattern: only these tests run (keeps slow files cheap). */
  filter?: string;
  mutants: Mutant[];
}

const one = (file: string, find: string, replace: string, count?: number): Edit => ({ file, find, replace, count });

export const GUARANTEES: Guarantee[] = [
  // ---- OAuth (docs/oauth.md, docs/security.md "Transport") ----
  {
    name: "pkce-s256",
    promise: "the code exchange needs the PKCE verifier whose S256 hash is the challenge (oauth.md)",
    tests: ["test/e2e/oauth-flow.test.ts"],
    filter: "verifier|PKCE",
    mutants: [
      {
        name: "challenge-as-verifier",
        what: "the code challenge itself is accepted as the verifier",
        edits: [
          one(
            "src/oauth/tokens.ts",
            "!secretsEqual(derived, rec.challenge))",
            "(!secretsEqual(derived, rec.challenge) && verifier !== rec.challenge))",
          ),
        ],
      },
      {
        name: "plain-any-verifier",
        what: "with code_challenge_method=plain any well-formed verifier passes",
        edits: [
          one("src/oauth/tokens.ts", '.digest("base64url") : verifier;', '.digest("base64url") : rec.challenge;'),
        ],
      },
    ],
  },
  {
    name: "code-binding",
    promise: "the token endpoint checks client_id and redirect_uri against the code (oauth.md, RFC 6749 §4.1.3)",
    tests: ["test/e2e/oauth-flow.test.ts"],
    filter: "redirect_uri|client",
    mutants: [
      {
        name: "redirect-uri-unchecked",
        what: "the token endpoint no longer compares redirect_uri",
        edits: [one("src/oauth/tokens.ts", ' || get("redirect_uri") !== rec.redirectUri', "")],
      },
    ],
  },
  {
    name: "code-burn",
    promise: "a code is dropped after 3 failed exchanges and expires after oauth_code_ttl_s (oauth.md)",
    tests: ["test/e2e/oauth-flow.test.ts", "test/e2e/oauth-limits.test.ts"],
    filter: "burn|code expires|verifier",
    mutants: [
      {
        name: "four-failures",
        what: "a fourth try is allowed",
        edits: [one("src/oauth/tokens.ts", "rec.failures >= MAX_CODE_FAILURES", "rec.failures > MAX_CODE_FAILURES")],
      },
      {
        name: "codes-never-expire",
        what: "expired codes are never pruned",
        edits: [one("src/oauth/common.ts", "if (t - rec.createdMs > ttlS * 1000) codes.delete(c);", "void c;")],
      },
    ],
  },
  {
    name: "token-claims",
    promise: "access tokens are verified for audience, jti, iat not in the future, and expiry (oauth.md)",
    tests: ["test/e2e/oauth-flow.test.ts", "test/e2e/oauth-future-iat.test.ts", "test/e2e/oauth-limits.test.ts"],
    filter: "audience|jti|future|expired",
    mutants: [
      {
        name: "no-jti-accepted",
        what: "a token without jti is accepted",
        edits: [one("src/oauth/server.ts", ' || typeof payload.jti !== "string")\n', ")\n")],
      },
      {
        name: "audience-unchecked",
        what: "jwtVerify no longer checks the audience",
        edits: [one("src/oauth/server.ts", "        audience: this.urls.resource,\n", "")],
      },
      {
        name: "future-iat-accepted",
        what: "a token issued in the future is accepted",
        edits: [one("src/oauth/server.ts", "payload.iat > now / 1000 + IAT_FUTURE_SKEW_S", "payload.iat < 0")],
      },
      {
        name: "expired-cached-token",
        what: "an expired token stays valid once it is in the verification cache",
        edits: [one("src/oauth/server.ts", "hit.expMs > now)", "hit.expMs > 0)")],
      },
    ],
  },
  {
    name: "pin-lockout",
    promise: "approval locks after 5 wrong PINs, even for the right PIN (security.md)",
    tests: ["test/e2e/oauth-limits.test.ts"],
    filter: "bad PINs",
    mutants: [
      {
        name: "no-lockout",
        what: "wrong PINs never lock approval",
        edits: [
          one(
            "src/oauth/pin-throttle.ts",
            "if (this.failures >= PIN_MAX_FAILURES) this.lockedUntil",
            "if (false) this.lockedUntil",
          ),
        ],
      },
    ],
  },
  // ---- HTTP edge (docs/security.md "Transport") ----
  {
    name: "origin-guard",
    promise: "a browser Origin must be one we trust; Origin: null is refused (security.md)",
    tests: ["test/e2e/oauth-flow.test.ts", "test/e2e/http-host-header.test.ts"],
    filter: "Origin|Host",
    mutants: [
      {
        name: "null-origin-accepted",
        what: "Origin: null (sandboxed frames, file: pages) is accepted",
        edits: [
          one(
            "src/http/origin-guard.ts",
            "if (origin === null) return true;",
            'if (origin === null || origin === "null") return true;',
          ),
        ],
      },
      {
        name: "any-origin-accepted",
        what: "every Origin is accepted",
        edits: [one("src/http/origin-guard.ts", "if (policy.origins.has(o)) return true;", "if (o) return true;")],
      },
      {
        name: "any-host-accepted",
        what: "every Host is accepted (DNS rebinding)",
        edits: [
          one("src/http/origin-guard.ts", "  return policy.hosts.has(hostHeader.toLowerCase());", "  return true;"),
        ],
      },
    ],
  },
  {
    name: "sse-resumption-bounds",
    promise:
      "the events kept for Last-Event-ID resumption are per session and bounded: 128 events, 2 MiB (security.md)",
    tests: ["test/http/event-store-bounds.test.ts"],
    mutants: [
      {
        name: "no-count-bound",
        what: "events are kept without a count limit",
        edits: [one("src/http/event-store.ts", "const MAX_EVENTS = 128;", "const MAX_EVENTS = 1_000_000;")],
      },
      {
        name: "no-byte-bound",
        what: "events are kept without a byte limit",
        edits: [one("src/http/event-store.ts", "(this.bytes > MAX_BYTES && this.events.length > 1)", "false")],
      },
    ],
  },
  {
    name: "mcp-session-owner",
    promise: "an MCP session is bound to the principal (client and subject) that opened it (security.md)",
    tests: ["test/e2e/oauth-flow.test.ts"],
    filter: "MCP session opened by one token",
    mutants: [
      {
        name: "owner-ignores-client",
        what: "the owner key leaves out the client id",
        edits: [one("src/http/mcp-sessions.ts", "return `${auth.clientId}\\u0000", 'return `${""}\\u0000')],
      },
      {
        name: "owner-unchecked",
        what: "any principal may use any MCP session",
        edits: [one("src/http/mcp-sessions.ts", "if (entry.owner !== ownerKey(auth)) {", "if (false) {")],
      },
    ],
  },
  {
    name: "agent-session-owner",
    promise: "with OAuth an agent session belongs to the client id and subject that started it (security.md)",
    tests: ["test/e2e/session-ownership.test.ts"],
    mutants: [
      {
        name: "subject-only",
        what: "the owner check compares the subject only",
        edits: [
          one(
            "src/sessions/store.ts",
            "(rec.owner.client_id !== caller.clientId || rec.owner.subject",
            "(rec.owner.subject",
          ),
        ],
      },
    ],
  },
  // ---- Human UI (docs/human-ui.md) ----
  {
    name: "ui-csrf",
    promise: "UI changes need a double-submit CSRF value tied to the UI session (security.md, human-ui.md)",
    tests: ["test/e2e/human-ui-terminal-socket.test.ts"],
    filter: "CSRF|REST API",
    mutants: [
      {
        name: "csrf-not-bound",
        what: "the CSRF value is not tied to the session's signed claim",
        edits: [one("src/ui/auth.ts", " || !equalHex(sha256Hex(header), claims.csrf_sha256))", ")")],
      },
    ],
  },
  // ---- Audit redaction (docs/audit.md) ----
  {
    name: "redaction",
    promise: "high-confidence token formats are redacted in the audit log (audit.md)",
    tests: ["test/audit/audit.test.ts", "test/e2e/audit-log.test.ts"],
    filter: "scrubs|redacted",
    mutants: [
      {
        name: "sk-rule-removed",
        what: "the sk- API key rule is gone",
        edits: [
          one(
            "src/audit/secret-rules.ts",
            "regex: /\\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,300}/,",
            "regex: /(?!)/,",
          ),
        ],
      },
      {
        name: "worker-token-rule-removed",
        what: "the remote worker invite and token rule is gone",
        edits: [
          one("src/audit/secret-rules.ts", "regex: /\\blsmcp_(?:inv|wk)_[A-Za-z0-9_-]{16,200}/,", "regex: /(?!)/,"),
        ],
      },
    ],
  },
  // ---- Download links (docs/file-links.md) ----
  {
    name: "download-links",
    promise: "only a hash of a link's token is stored; a link serves at most max_downloads times (file-links.md)",
    tests: ["test/e2e/file-links.test.ts"],
    mutants: [
      {
        name: "raw-token-at-rest",
        what: "the raw token is stored beside its hash",
        edits: [
          one(
            "src/links/store.ts",
            "token_sha256: LinkStore.tokenSha256(token),\n      bytes: copied",
            "token_sha256: LinkStore.tokenSha256(token),\n      token,\n      bytes: copied",
          ),
        ],
      },
      {
        name: "one-extra-download",
        what: "a link serves one download more than allowed",
        edits: [one("src/links/store.ts", "l.downloads >= l.max_downloads", "l.downloads > l.max_downloads")],
      },
    ],
  },
  // ---- Remote transfer gateway (docs/remote-workers.md) ----
  {
    name: "gateway-capabilities",
    promise: "a transfer capability is bound to its direction and to its worker, for uploads and downloads",
    tests: ["test/transfer/gateway.test.ts"],
    filter: "refusals|bound",
    mutants: [
      {
        name: "download-not-bound-to-worker",
        what: "a download capability works for any worker",
        edits: [
          one(
            "src/transfer/gateway/capability.ts",
            "|| worker === null || bound !== worker)",
            '|| worker === null || (direction === "upload" && bound !== worker))',
          ),
        ],
      },
      {
        name: "upload-not-bound-to-worker",
        what: "an upload capability works for any worker",
        edits: [
          one(
            "src/transfer/gateway/capability.ts",
            "|| worker === null || bound !== worker)",
            '|| worker === null || (direction === "download" && bound !== worker))',
          ),
        ],
      },
    ],
  },
  {
    name: "gateway-digest",
    promise: "a worker's upload becomes a ready gateway object only when its bytes hash to the digest it announced",
    tests: ["test/transfer/gateway.test.ts"],
    filter: "digest",
    mutants: [
      {
        name: "ready-on-digest-mismatch",
        what: "an object whose bytes do not match the announced digest becomes ready",
        edits: [
          one(
            "src/transfer/gateway/spool.ts",
            'm.state = digest === m.expected_sha256 ? "ready" : "failed";',
            'm.state = "ready";',
          ),
        ],
      },
    ],
  },
  // ---- File tools (docs/file-tools.md, docs/security.md "File tools") ----
  {
    name: "writes-by-rename",
    promise: "writes replace files by rename, so a hard link to a file outside is never written through (security.md)",
    tests: ["test/e2e/files-symlinks.test.ts"],
    filter: "hard link",
    mutants: [
      {
        name: "write-in-place",
        what: "write_file overwrites the existing file's bytes in place",
        edits: [
          one(
            "src/fs/write.ts",
            "        renameSync(tmp, target);\n",
            '        { const fs = require("node:fs"); fs.writeFileSync(target, fs.readFileSync(tmp)); ' +
              "rmSync(tmp, { force: true }); }\n",
          ),
        ],
      },
    ],
  },
  {
    name: "point-of-use-checks",
    promise: "paths are re-checked at the point of use: an opened file or pinned parent outside the workdir is refused",
    tests: ["test/e2e/files-symlinks.test.ts"],
    filter: "swapped",
    mutants: [
      {
        name: "read-recheck-removed",
        what: "a read no longer checks where its descriptor points",
        edits: [
          one("src/fs/resolve.ts", "if (where !== undefined) checkCanonical(policy, where, shown);", "void where;"),
        ],
      },
      {
        name: "write-recheck-removed",
        what: "a write no longer checks where its pinned parent directory is",
        edits: [
          one(
            "src/fs/resolve.ts",
            "if (!isWithin(policy.workdir, where) || (policy.stateDir && isWithin(policy.stateDir, where))) {",
            "if (false) {",
          ),
        ],
      },
    ],
  },
  {
    name: "final-symlink",
    promise: "a final symlink pointing out of the workdir is refused with path_outside_workdir (security.md)",
    tests: ["test/e2e/files-symlinks.test.ts"],
    filter: "pointing out|final component",
    // Not listed: removing writeAtomic's own symlink check changes nothing a caller can see (a link
    // raced in is then refused as not_a_regular_file, and rename never follows it): an equivalent mutant.
    mutants: [
      {
        name: "final-link-not-resolved",
        what: "resolution checks the link's own path instead of where it points",
        edits: [one("src/fs/resolve.ts", "real = realpathSync(lexical);", "real = lexical;")],
      },
    ],
  },
  {
    name: "state-dir-refused",
    promise: "file tools refuse the private state dir, even inside the workspace (security.md)",
    tests: ["test/e2e/files-tools.test.ts"],
    filter: "escape attempts|state dir|workspace_search and fetch",
    mutants: [
      {
        name: "state-dir-allowed",
        what: "a canonical path inside the state dir is not refused",
        edits: [one("src/fs/resolve.ts", "if (policy.stateDir && isWithin(policy.stateDir, real)) {", "if (false) {")],
      },
    ],
  },
  // ---- Local state and process (docs/security.md "State", "Process", "Transport") ----
  {
    name: "private-state",
    promise: "the state dir is 0700 and its files 0600 (security.md)",
    tests: ["test/store/atomic.test.ts", "test/e2e/spine-cli.test.ts"],
    filter: "private",
    mutants: [
      {
        name: "world-readable-files",
        what: "state files are written 0644",
        edits: [
          one(
            "src/store/atomic.ts",
            "export const PRIVATE_FILE_MODE = 0o600;",
            "export const PRIVATE_FILE_MODE = 0o644;",
          ),
        ],
      },
      {
        name: "open-state-dir",
        what: "the state dir is made 0755",
        edits: [
          one(
            "src/store/atomic.ts",
            "export const PRIVATE_DIR_MODE = 0o700;",
            "export const PRIVATE_DIR_MODE = 0o755;",
          ),
        ],
      },
    ],
  },
  {
    name: "non-dumpable",
    promise: "serve marks itself non-dumpable, so same-user commands cannot read its memory or environ (security.md)",
    tests: ["test/e2e/spine-harden.test.ts"],
    mutants: [
      {
        name: "stays-dumpable",
        what: "prctl sets the process dumpable instead",
        edits: [
          one("src/native/harden.ts", "prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)", "prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)"),
        ],
      },
    ],
  },
  {
    name: "no-auth-loopback-only",
    promise: "auth_mode=none is refused on a non-loopback host (security.md)",
    tests: ["test/e2e/spine-cli.test.ts"],
    filter: "unsafe combinations",
    mutants: [
      {
        name: "no-auth-anywhere",
        what: "auth_mode=none starts on any host",
        edits: [
          one(
            "src/cli/serve.ts",
            "  if (!isLoopbackHost(s.host)) {\n    return `auth_mode=none",
            "  if (false) {\n    return `auth_mode=none",
          ),
        ],
      },
    ],
  },
  {
    name: "ui-local-token",
    promise: "the UI loopback token is accepted only from a loopback peer and only without Origin (human-ui.md)",
    tests: ["test/e2e/human-ui-local-token.test.ts"],
    mutants: [
      {
        name: "token-with-origin",
        what: "a browser (Origin present) may use the loopback token",
        edits: [one("src/ui/local-token.ts", 'if (req.headers.get("origin") !== null)\n', "if (false)\n")],
      },
      {
        name: "token-from-any-peer",
        what: "a non-loopback peer may use the loopback token",
        edits: [one("src/ui/local-token.ts", 'if (!isLoopbackName(peer.replace(/^::ffff:/, "")))\n', "if (false)\n")],
      },
    ],
  },
  // ---- Containment (docs/security.md "Bounded command containment") ----
  {
    name: "runner-two-empty-walks",
    promise: "cleanup is done only when two procfs walks in a row find no descendant (security.md)",
    tests: ["test/native/runner.test.ts"],
    filter: "two empty walks",
    mutants: [
      {
        name: "one-walk",
        what: "one empty walk ends cleanup",
        edits: [one("native/runner/supervise.c", "if (++empties >= 2)", "if (++empties >= 1)")],
      },
    ],
  },
  {
    name: "runner-sigkill",
    promise: "a tree that ignores SIGTERM is SIGKILLed after the grace period (security.md)",
    tests: ["test/native/runner.test.ts"],
    filter: "ignoring SIGTERM",
    mutants: [
      {
        name: "no-sigkill",
        what: "cleanup only ever sends SIGTERM",
        edits: [
          one("native/runner/supervise.c", "int sig = t < term_until ? SIGTERM : SIGKILL;", "int sig = SIGTERM;"),
        ],
      },
    ],
  },
  {
    name: "runner-priority",
    promise: "while it stops a tree, the runner lowers the tree's CPU priority to nice 19 (security.md)",
    tests: ["test/native/runner.test.ts"],
    filter: "priority",
    mutants: [
      {
        name: "no-nice",
        what: "the tree being stopped keeps its priority",
        edits: [
          one("native/runner/supervise.c", "\t\tsetpriority(PRIO_PROCESS, (id_t)p, 19);\n", "\n"),
          one("native/runner/supervise.c", "\tsetpriority(PRIO_PGRP, (id_t)pgid, 19);\n", "\n"),
        ],
      },
    ],
  },
  {
    name: "runner-death-fails-closed",
    promise: "when the runner dies mid-call the call fails with containment_unconfirmed (security.md)",
    tests: ["test/e2e/runner-server.test.ts"],
    filter: "runner killed mid-call",
    mutants: [
      {
        name: "death-reads-as-exit-0",
        what: "a call whose runner died ends as if the command exited 0",
        edits: [
          one(
            "src/exec/runner-server.ts",
            '    call.signalCode = "runner server died";\n',
            "    call.signalCode = null;\n",
          ),
          one("src/exec/runner-server.ts", "    call.resolveExit(-1);\n", "    call.resolveExit(0);\n"),
        ],
      },
    ],
  },
  // ---- ssh server (docs/ssh.md) ----
  {
    name: "ssh-master-orphan",
    promise: "an authenticated master never outlives its SIGKILLed lsm-runner guard by more than 2 s (ssh.md)",
    tests: ["test/e2e/ssh-server-death.test.ts"],
    filter: "ignores TERM",
    mutants: [
      {
        name: "orphan-left-running",
        what: "the server leaves a master whose runner died to the runner's parent-death TERM alone",
        edits: [
          one(
            "src/ssh/master.ts",
            "if (this.sshIdentity) void stopOrphan(this.sshIdentity, ORPHAN_GRACE_MS);",
            "if (this.sshIdentity) void this.sshIdentity;",
          ),
        ],
      },
    ],
  },
  // ---- Lifecycle ----
  {
    name: "stdio-stoppable",
    promise: "a stdio server stops on SIGTERM whatever its stdin is, an endless character device included",
    tests: ["test/e2e/spine-cli.test.ts"],
    filter: "character device",
    mutants: [
      {
        name: "device-read-on-process-stdin",
        what: "a character device on stdin is read through process.stdin, whose loop never yields",
        edits: [one("src/core/stdin.ts", "isCharacterDevice() && !isatty(0)", "isCharacterDevice() && false")],
      },
    ],
  },
  {
    name: "ssh-stdin-bounded",
    promise: "the ssh server refuses an MCP message over 16 MB as it streams in, without holding it (ssh.md)",
    tests: ["test/e2e/ssh-stdin-bounds.test.ts"],
    filter: "line is refused",
    mutants: [
      {
        name: "ssh-message-unbounded",
        what: "the ssh server reads MCP messages of any length",
        edits: [one("src/ssh/server.ts", "const MAX_MESSAGE_BYTES = 16_000_000;", "const MAX_MESSAGE_BYTES = 0;")],
      },
    ],
  },
  // ---- Approvals (docs/approvals.md) ----
  {
    name: "approval-gate",
    promise:
      "a call the approval policy holds runs only after a person allows it; a decline, deny or timeout runs " +
      "nothing; allow for this session covers that exact command only; only the operator answers the queue " +
      "(approvals.md)",
    tests: ["test/e2e/approvals.test.ts"],
    mutants: [
      {
        name: "timeout-allows",
        what: "an unanswered approval lets the call run",
        edits: [
          one(
            "src/approvals/service.ts",
            'setTimeout(() => finish("timed_out",',
            'setTimeout(() => finish("allow_once",',
          ),
        ],
      },
      {
        name: "decline-allows",
        what: "declining the elicitation form lets the call run",
        edits: [
          one(
            "src/approvals/service.ts",
            'finish(answer === "decline" ? "deny" : answer,',
            'finish(answer === "decline" ? "allow_once" : answer,',
          ),
        ],
      },
      {
        name: "remember-whole-tool",
        what: "allow for this session remembers every command of the tool, not the exact one",
        edits: [
          one(
            "src/approvals/service.ts",
            "const memoKey = `${subject.tool}\\0${subject.command}`;",
            "const memoKey = subject.tool;",
          ),
        ],
      },
      {
        name: "bearer-answers",
        what: "a client's bearer token may list and answer approvals",
        edits: [
          one(
            "src/ui/api.ts",
            '  if (principal && !principal.operator)\n    throw new ToolError("insufficient_scope", `${what}',
            '  if (false)\n    throw new ToolError("insufficient_scope", `${what}',
          ),
        ],
      },
      {
        name: "no-gate",
        what: "the registry never consults the approval gate",
        edits: [one("src/server/app.ts", "  registry.gate = approvalGate();\n", "\n")],
      },
    ],
  },
];
