import pkg from "../../package.json" with { type: "json" };

// Set only by `scripts/build.ts --version-override` (tests of the worker update path).
declare const __LSM_VERSION_OVERRIDE__: string | undefined;
export const VERSION: string = typeof __LSM_VERSION_OVERRIDE__ === "string" ? __LSM_VERSION_OVERRIDE__ : pkg.version;
export const PRODUCT = "local-shell-mcp";

// Set by scripts/build.ts (Bun `define`); absent when the sources run directly (tests, `bun src/main.ts`).
declare const __LSM_BUILD_TARGET__: string | undefined;
declare const __LSM_BUILD_DIGEST__: string | undefined;
/** The release target this executable was built for, e.g. linux-arm64-musl. */
export const BUILD_TARGET: string =
  typeof __LSM_BUILD_TARGET__ === "string" ? __LSM_BUILD_TARGET__ : `${process.platform}-${process.arch}`;
/** SHA-256 over the target, Bun version, sources, lockfile and embedded helpers (scripts/build.ts). */
export const BUILD_DIGEST: string = typeof __LSM_BUILD_DIGEST__ === "string" ? __LSM_BUILD_DIGEST__ : "unbuilt";
/** One line for `--version` and `version`. */
export const VERSION_LINE = `${PRODUCT} ${VERSION} ${BUILD_TARGET} build ${BUILD_DIGEST.slice(0, 16)}`;
