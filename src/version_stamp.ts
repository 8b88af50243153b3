// Build step, run by `deno task stamp` before `deno compile` (and by the
// Dockerfile, whose context has no .git): writes the commit to COMMIT_STAMP
// for src/version.ts to read at run time. BIGFLEET_COMMIT wins (a Docker
// build argument); else `git rev-parse HEAD`; else "unknown", so a build
// outside a checkout still succeeds. A malformed BIGFLEET_COMMIT stops the
// build: shipping a wrong commit is worse than none.

import { COMMIT_STAMP, isCommitId, UNKNOWN } from "./version.ts";

async function gitHead(): Promise<string | null> {
  try {
    const out = await new Deno.Command("git", {
      args: ["rev-parse", "HEAD"],
      stdout: "piped",
      stderr: "null",
    }).output();
    const text = new TextDecoder().decode(out.stdout).trim();
    return out.success && isCommitId(text) ? text : null;
  } catch {
    return null; // no git binary
  }
}

async function main(): Promise<number> {
  const given = Deno.env.get("BIGFLEET_COMMIT")?.trim() ?? "";
  if (given !== "" && given !== UNKNOWN && !isCommitId(given.toLowerCase())) {
    console.error(
      `error: BIGFLEET_COMMIT ${JSON.stringify(given)} is not a commit id (7 to 40 hex digits)`,
    );
    return 1;
  }
  const commit = given !== "" ? given.toLowerCase() : (await gitHead()) ?? UNKNOWN;
  const path = new URL(`../${COMMIT_STAMP}`, import.meta.url);
  await Deno.mkdir(new URL(".", path), { recursive: true });
  await Deno.writeTextFile(path, `${commit}\n`);
  console.error(`stamped ${COMMIT_STAMP}: ${commit}`);
  return 0;
}

if (import.meta.main) Deno.exit(await main());
