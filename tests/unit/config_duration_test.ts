import assert from "node:assert/strict";
import { parseDuration, parseTimerDuration } from "../../src/config/duration.ts";

Deno.test("duration: Go forms parse to milliseconds", () => {
  const cases: [string, number][] = [
    ["0", 0],
    ["0s", 0],
    ["500ms", 500],
    ["2m", 120_000],
    ["1h30m", 5_400_000],
    ["1.5s", 1500],
    [".5s", 500],
    ["1.s", 1000],
    ["+3s", 3000],
    ["250us", 0.25],
    ["100µs", 0.1],
    ["1000000ns", 1],
    ["1h2m3s4ms", 3_723_004],
  ];
  for (const [text, ms] of cases) assert.equal(parseDuration(text), ms, text);
});

Deno.test("duration: garbage is rejected", () => {
  for (
    const bad of ["", "5", "1.5", "s", "ms", "2x", "1h30", "-1s", "1 s", " 1s", "abc", "1s2", "."]
  ) {
    assert.throws(() => parseDuration(bad), Error, bad);
  }
});

Deno.test("duration: a bare number hints at the missing unit", () => {
  assert.throws(() => parseDuration("30"), /missing unit/);
  assert.throws(() => parseDuration("3d"), /unknown unit "d"/);
});

Deno.test("duration: timer values stay below the setTimeout ceiling", () => {
  assert.equal(parseTimerDuration("596h"), 2_145_600_000);
  assert.throws(() => parseTimerDuration("597h"), /timer limit/);
  assert.equal(parseDuration("597h"), 2_149_200_000);
});
