import { defineCommand } from "citty";
import { enrollArgs, enrollOrResume, guarded, printEnrollment, runWorker } from "./worker-common.ts";

export default defineCommand({
  meta: { name: "connect", description: "Enroll (or resume) and serve the controller in the foreground" },
  args: enrollArgs,
  run: ({ args }) =>
    guarded(async () => {
      const r = await enrollOrResume(args);
      printEnrollment(r);
      return runWorker(r.root, r.identity);
    }),
});
