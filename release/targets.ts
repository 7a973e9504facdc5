/**
 * The release targets: Bun's compile target and which native helpers each one embeds. One static
 * Linux helper set per CPU serves glibc and musl hosts alike; macOS embeds neither the Linux runner
 * nor tmux (its containment is the hidden `bounded-runner` subcommand).
 */
export interface ReleaseTarget {
  /** `bun build --compile --target=` value. */
  bun: string;
  /** Folder under build/native/ with this target's helpers, or null when it embeds none. */
  helpers: "linux-x64" | "linux-arm64" | null;
  /** What `file` says about the executable (checked by the release tests). */
  fileSays: RegExp;
  /**
   * musl targets: the CPU for which the archive ships `lib/libstdc++.so.6`, which Bun's musl runtime
   * needs (native/libstdcxx-musl/build.sh); null for the others.
   */
  muslLibstdcxx: "x86_64" | "aarch64" | null;
}

export const TARGETS: Record<string, ReleaseTarget> = {
  "linux-x64": { bun: "bun-linux-x64", helpers: "linux-x64", fileSays: /ELF 64-bit LSB.*x86-64/, muslLibstdcxx: null },
  "linux-arm64": {
    bun: "bun-linux-arm64",
    helpers: "linux-arm64",
    fileSays: /ELF 64-bit LSB.*ARM aarch64/,
    muslLibstdcxx: null,
  },
  "linux-x64-musl": {
    bun: "bun-linux-x64-musl",
    helpers: "linux-x64",
    fileSays: /ELF 64-bit LSB.*x86-64/,
    muslLibstdcxx: "x86_64",
  },
  "linux-arm64-musl": {
    bun: "bun-linux-arm64-musl",
    helpers: "linux-arm64",
    fileSays: /ELF 64-bit LSB.*ARM aarch64/,
    muslLibstdcxx: "aarch64",
  },
  "darwin-x64": { bun: "bun-darwin-x64", helpers: null, fileSays: /Mach-O 64-bit.*x86_64/, muslLibstdcxx: null },
  "darwin-arm64": { bun: "bun-darwin-arm64", helpers: null, fileSays: /Mach-O 64-bit.*arm64/, muslLibstdcxx: null },
};

export const TARGET_NAMES = Object.keys(TARGETS);

/** The target this machine's default build produces (the dev build, `bun scripts/build.ts`). */
export function hostTarget(): string {
  const arch = process.arch === "arm64" ? "arm64" : "x64";
  if (process.platform === "darwin") return `darwin-${arch}`;
  // Bun's own build tells us the libc it was linked against.
  const musl =
    process.platform === "linux" &&
    !(process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header
      ?.glibcVersionRuntime;
  return `linux-${arch}${musl ? "-musl" : ""}`;
}
