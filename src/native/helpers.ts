import runnerEmbedded from "../../build/native/lsm-runner" with { type: "file" };
import { extractHelper } from "./extract.ts";

/** The containment runner (native/runner), embedded at build time and extracted on first use. */
export function containmentRunner(): Promise<string> {
  return extractHelper("lsm-runner", runnerEmbedded);
}
