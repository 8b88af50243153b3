// `.ci/run`'s closing digest of what failed: each failed test's name and the
// first lines of its failure, read from the JUnit report of `deno task test`,
// printed last so that a log cut to its tail still says why.
//
//   deno run --allow-read .ci/failures.ts JUNIT_XML

const LINES = 12;
const WIDTH = 300;

const xml = await Deno.readTextFile(Deno.args[0]).catch(() => "");
const unescape = (s: string) =>
  s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'")
    .replace(/&amp;/g, "&");

const out: string[] = [];
for (const tc of xml.split("<testcase ").slice(1)) {
  const failure = /<failure message="([^"]*)"/.exec(tc);
  if (!failure) continue;
  const name = unescape(/^name="([^"]*)"/.exec(tc)?.[1] ?? "?");
  const file = unescape(/classname="([^"]*)"/.exec(tc)?.[1] ?? "?");
  const message = unescape(failure[1]);
  // A test whose steps failed says only that; its steps carry the reasons.
  if (/^\d+ test steps? failed\.?$/.test(message.trim())) continue;
  out.push(`failed: ${file} > ${name}`);
  for (const line of message.split("\n").filter((l) => l.trim() !== "").slice(0, LINES)) {
    out.push(`    ${line.slice(0, WIDTH)}`);
  }
}
if (out.length > 0) console.log(["", "what failed (first lines of each):", ...out].join("\n"));
