import { PRODUCT, VERSION } from "./core/version.ts";

// Fast path: answer --version without loading the command tree.
const argv = process.argv.slice(2);
if (argv.length === 1 && (argv[0] === "--version" || argv[0] === "-v")) {
  process.stdout.write(`${PRODUCT} ${VERSION}\n`);
  process.exit(0);
}

// zod's JIT compiles a parser per schema with eval; for our small, mostly one-shot inputs the
// interpreter is faster overall and keeps start-up short.
const { z } = await import("zod");
z.config({ jitless: true });

const { runMain } = await import("citty");
const { mainCommand } = await import("./cli/index.ts");
await runMain(mainCommand);
