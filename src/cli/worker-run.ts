import { defineCommand } from "citty";
import { existsSync, readdirSync } from "node:fs";
import { WorkerCommandError } from "../worker/enroll.ts";
import { PROFILE_ID_PATTERN, profilePaths, readIdentity, workerPaths, workerRoot } from "../worker/layout.ts";
import { guarded, runWorker } from "./worker-common.ts";

/** The profile to run: the one named, or the only enrolled one. */
function chooseProfile(root: string, named: string | undefined): string {
  if (named !== undefined) {
    if (!PROFILE_ID_PATTERN.test(named))
      throw new WorkerCommandError("the profile id must be p_ followed by 8-64 letters, digits, '_' or '-'");
    return named;
  }
  const dir = workerPaths(root).profiles;
  const ids = existsSync(dir)
    ? readdirSync(dir).filter((n) => PROFILE_ID_PATTERN.test(n) && existsSync(profilePaths(root, n).identity))
    : [];
  if (ids.length === 1) return ids[0]!;
  throw new WorkerCommandError(
    ids.length === 0
      ? "no enrolled profile here; run worker connect with an invite"
      : `several profiles are enrolled; name one of ${ids.join(", ")}`,
  );
}

export default defineCommand({
  meta: { name: "run", description: "Serve the controller from a stored identity (what services start)" },
  args: { profile: { type: "positional", required: false, description: "Profile id (p_…)" } },
  run: ({ args }) =>
    guarded(async () => {
      const root = workerRoot();
      const profile = chooseProfile(root, typeof args.profile === "string" ? args.profile : undefined);
      const identity = readIdentity(root, profile);
      if (!identity)
        throw new WorkerCommandError(
          `profile ${profile} has no identity; an invite is required to enroll it (worker connect)`,
        );
      return runWorker(root, identity);
    }),
});
