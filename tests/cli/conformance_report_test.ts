// The runner's reports from a real `deno test --junit-path` run: statuses,
// escaped text and durations survive, ids are found in `[label] id title`
// names, and a behaviour the run never reached is "missing" (run incomplete).

import assert from "node:assert/strict";
import { classify, junitXml, parseDenoJunit } from "../conformance/runner/report.ts";

const LANE = `
Deno.test("[target] B101 passes", () => {});
Deno.test("[target] baseline LabelShape fails <&> \\"quoted\\"", () => {
  throw new Error("want <a> & \\"b\\"\\nsecond line");
});
Deno.test({ name: "[target] B102 skipped", ignore: true, fn() {} });
Deno.test("[durable] setup: boots", () => {});
`;

async function denoJunit(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "bf-report-" });
  try {
    await Deno.writeTextFile(`${dir}/lane.ts`, LANE);
    await new Deno.Command(Deno.execPath(), {
      args: ["test", "--no-check", `--junit-path=${dir}/out.xml`, `${dir}/lane.ts`],
      cwd: dir,
      stdout: "null",
      stderr: "null",
    }).output();
    return await Deno.readTextFile(`${dir}/out.xml`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("report: Deno's JUnit read back into results by behaviour id, missing ones added", async () => {
  const raw = parseDenoJunit(await denoJunit());
  assert.deepEqual(raw.map((c) => c.status), ["passed", "failed", "skipped", "passed"]);
  assert.equal(raw[1].name, '[target] baseline LabelShape fails <&> "quoted"');
  assert.match(raw[1].message, /want <a> & "b"\nsecond line/);

  const report = classify(raw, [
    { id: "B101", lane: "extension", title: "" },
    { id: "baseline LabelShape", lane: "baseline", title: "" },
    { id: "B102", lane: "extension", title: "" },
    { id: "B103", lane: "extension", title: "never ran" },
  ]);
  const byId = new Map(report.results.map((r) => [r.id ?? r.title, r]));
  assert.equal(byId.get("B101")!.status, "passed");
  assert.equal(byId.get("B101")!.title, "passes");
  assert.equal(byId.get("baseline LabelShape")!.status, "failed");
  assert.equal(byId.get("baseline LabelShape")!.lane, "baseline");
  assert.equal(byId.get("B102")!.status, "skipped");
  assert.equal(byId.get("B103")!.status, "missing");
  assert.equal(byId.get("[durable] setup: boots")!.lane, "checks");
  assert.deepEqual(report.summary, { total: 5, passed: 2, failed: 1, skipped: 1, missing: 1 });
  assert.equal(report.outcome, "failed");
  assert.equal(
    classify(raw.filter((c) => c.status !== "failed"), [{ id: "B9", lane: "scale", title: "" }])
      .outcome,
    "incomplete",
  );

  // The JUnit written back: well-formed escapes, missing counted as a failure.
  const xml = junitXml(report, "run");
  assert.match(xml, /<testsuites name="run" tests="5" failures="2" skipped="1"/);
  assert.match(xml, /name="baseline LabelShape fails &lt;&amp;&gt; &quot;quoted&quot;"/);
  assert.match(xml, /<failure message="no result: [^"]*" type="missing">/);
  const back = parseDenoJunit(xml);
  assert.deepEqual(back.map((c) => c.status), ["passed", "skipped", "failed", "failed", "passed"]);
});
