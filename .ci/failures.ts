// `.ci/run`'s closing digest of what failed: each failed test's name and the
// first lines of its failure, read from the JUnit report of `deno task test`,
// printed last so that a log cut to its tail still says why.
//
//   deno run --allow-read .ci/failures.ts JUNIT_XML

import { readTestCases } from "./junit.ts";

const LINES = 12;
const WIDTH = 300;

const out: string[] = [];
for (const tc of await readTestCases(Deno.args[0])) {
  if (tc.outcome !== "failed") continue;
  // A test whose steps failed says only that; its steps carry the reasons.
  if (/^\d+ test steps? failed\.?$/.test(tc.failure.trim())) continue;
  out.push(`failed: ${tc.file} > ${tc.name}`);
  for (const line of tc.failure.split("\n").filter((l) => l.trim() !== "").slice(0, LINES)) {
    out.push(`    ${line.slice(0, WIDTH)}`);
  }
}
if (out.length > 0) console.log(["", "what failed (first lines of each):", ...out].join("\n"));
