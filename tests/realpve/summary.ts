// `.ci/run`'s line for the real-PVE lane: its own pass count, read from the
// JUnit report of `deno task test` (tests named `realpve: …` or `[realpve] …`), or why
// it was skipped (the `realpve lane skipped: …` line rig.ts prints).
//
//   deno run --allow-read tests/realpve/summary.ts JUNIT_XML TEST_LOG

import { readTestCases } from "../../.ci/junit.ts";

const [junit, log] = Deno.args;
const skipped = (await Deno.readTextFile(log).catch(() => ""))
  .split("\n").find((l) => l.startsWith("realpve lane skipped: "));

let passed = 0;
let failed = 0;
let ignored = 0;
// Counted by name: a testcase's suite is the file that registered it (rig.ts, suite.ts).
for (const tc of await readTestCases(junit)) {
  if (!tc.name.startsWith("realpve: ") && !tc.name.startsWith("[realpve] ")) continue;
  if (tc.outcome === "failed") failed++;
  else if (tc.outcome === "skipped") ignored++;
  else passed++;
}
if (skipped !== undefined && passed + failed === 0) console.log(skipped);
else if (passed + failed + ignored === 0) console.log("realpve lane: no lane tests ran");
else console.log(`realpve lane: ${passed} passed, ${failed} failed, ${ignored} ignored`);
