import runnerEmbedded from "../../build/native/lsm-runner" with { type: "file" };
import { join } from "node:path";
import { writeFileAtomic, ensurePrivateDir } from "../store/atomic.ts";
import { extractHelper, helperDir } from "./extract.ts";
import { holdHelperFolder } from "./helper-folders.ts";
import { selfArgv } from "./macos/cli.ts";

/** The containment runner (native/runner), embedded at build time and extracted on first use. */
export function containmentRunner(): Promise<string> {
  return extractHelper("lsm-runner", runnerEmbedded);
}

/**
 * The runner for bounded commands and jobs. On macOS that is this executable's hidden
 * `bounded-runner` subcommand (a launchd job per command, src/native/macos/), reached through a
 * small script so that callers keep passing one runner path; elsewhere the embedded lsm-runner.
 */
export function boundedRunner(platform: string = process.platform): Promise<string> {
  if (platform !== "darwin") return containmentRunner();
  // helperDir() throws when no private folder exists: inside the chain, so it becomes a rejection.
  macScript ??= Promise.resolve()
    .then(() => holdHelperFolder(helperDir()))
    .then(() => writeRunnerScript(helperDir(), selfArgv()));
  macScript.catch(() => (macScript = undefined));
  return macScript;
}
let macScript: Promise<string> | undefined;

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** Writes (0700, atomically, in the private helper folder) `exec SELF... bounded-runner "$@"`. */
export function writeRunnerScript(dir: string, self: string[]): string {
  ensurePrivateDir(dir);
  const path = join(dir, "bounded-runner");
  writeFileAtomic(path, `#!/bin/sh\nexec ${self.map(quote).join(" ")} bounded-runner "$@"\n`, 0o700);
  return path;
}
