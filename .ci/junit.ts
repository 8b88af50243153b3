// The test cases of a `deno test --junit-path` report, as .ci/run's closing
// lines read them (.ci/failures.ts, tests/realpve/summary.ts).

export interface TestCase {
  name: string;
  /** The file that registered it (the report's classname). */
  file: string;
  outcome: "passed" | "failed" | "skipped";
  /** The failure's message; "" unless failed. */
  failure: string;
}

const unescape = (s: string) =>
  s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'")
    .replace(/&amp;/g, "&");

/** Every test case of the report at `path` (none when it is missing). */
export async function readTestCases(path: string): Promise<TestCase[]> {
  const xml = await Deno.readTextFile(path).catch(() => "");
  return xml.split("<testcase ").slice(1).map((tc) => {
    const body = tc.slice(0, tc.indexOf("</testcase>"));
    const failed = body.includes("<failure") || body.includes("<error");
    return {
      name: unescape(/^name="([^"]*)"/.exec(tc)?.[1] ?? "?"),
      file: unescape(/classname="([^"]*)"/.exec(tc)?.[1] ?? "?"),
      outcome: failed ? "failed" : body.includes("<skipped") ? "skipped" : "passed",
      failure: unescape(/<(?:failure|error) message="([^"]*)"/.exec(body)?.[1] ?? ""),
    };
  });
}
