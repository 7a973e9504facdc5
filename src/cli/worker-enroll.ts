import { defineCommand } from "citty";
import { enrollArgs, enrollOrResume, guarded, printEnrollment } from "./worker-common.ts";

export default defineCommand({
  meta: { name: "enroll", description: "Enroll this host with a controller (or keep the stored identity) and exit" },
  args: enrollArgs,
  run: ({ args }) => guarded(async () => printEnrollment(await enrollOrResume(args))),
});
