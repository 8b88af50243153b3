// What build this is. The version is a constant released with the code; the
// commit cannot be asked of git at run time (the binary ships without it), so
// the build writes it to COMMIT_STAMP first (src/version_stamp.ts, run by
// `deno task stamp`) and `deno compile --include` embeds that file. Reading it
// never fails: anything missing or malformed is "unknown". See docs/cli.md.

/** The release version; the Helm chart's appVersion says the same. */
export const VERSION = "0.1.0";

/** Where the build stamps the commit, relative to the repository root. */
export const COMMIT_STAMP = "build/commit";

export const UNKNOWN = "unknown";

export interface BuildInfo {
  version: string;
  commit: string;
  deno: string;
  v8: string;
  typescript: string;
}

const COMMIT_RE = /^[0-9a-f]{7,40}$/;

/** True for what a stamp may hold: an abbreviated or full hex commit id. */
export function isCommitId(text: string): boolean {
  return COMMIT_RE.test(text);
}

let cached: BuildInfo | undefined;

/** The build's identity; the commit is read once. */
export function buildInfo(): BuildInfo {
  cached ??= {
    version: VERSION,
    commit: readCommit(),
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    typescript: Deno.version.typescript,
  };
  return cached;
}

function readCommit(): string {
  try {
    const text = Deno.readTextFileSync(new URL(`../${COMMIT_STAMP}`, import.meta.url)).trim();
    return isCommitId(text) ? text : UNKNOWN;
  } catch {
    // No stamp (a source tree never stamped) or no read permission.
    return UNKNOWN;
  }
}
