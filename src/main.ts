import { VERSION_LINE } from "./core/version.ts";

// Fast path: answer --version without loading the command tree.
const argv = process.argv.slice(2);
if (argv.length === 1 && (argv[0] === "--version" || argv[0] === "-v")) {
  process.stdout.write(`${VERSION_LINE}\n`);
  process.exit(0);
}

// Hidden: the macOS containment runner, started by the server (and by launchd) for each bounded
// command; not in the help because nobody should call it by hand.
if (argv[0] === "bounded-runner") {
  const { boundedRunnerMain } = await import("./native/macos/cli.ts");
  process.exit(await boundedRunnerMain(argv.slice(1)));
}

if (argv[0] === "serve") {
  const { unsupportedPlatform } = await import("./core/platform.ts");
  const refusal = unsupportedPlatform();
  if (refusal) {
    process.stderr.write(`${refusal}\n`);
    process.exit(2);
  }
}

// Fast path: `serve` starts every MCP client's server, so it skips citty's parser (only its help
// goes through citty, which treats a --help or -h anywhere as a request for help).
if (argv[0] === "serve" && !argv.includes("--help") && !argv.includes("-h")) {
  const { runServe } = await import("./cli/serve.ts");
  await runServe(argv.slice(1));
} else {
  // citty colours its help unless NO_COLOR=1; a pipe or file gets plain text.
  if (!process.stdout.isTTY && process.env.FORCE_COLOR === undefined) process.env.NO_COLOR = "1";
  const { runMain } = await import("citty");
  const { mainCommand } = await import("./cli/index.ts");
  await runMain(mainCommand);
}
