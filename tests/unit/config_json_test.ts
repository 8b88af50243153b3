import assert from "node:assert/strict";
import { JsonObject, parseJson } from "../../src/config/json.ts";

Deno.test("json: objects keep file order, integer-like keys included", () => {
  const v = parseJson('{"b": 1, "2": [true, false, null], "__proto__": "x", "a": {"k": -1.5e2}}');
  assert.ok(v instanceof JsonObject);
  assert.deepEqual(v.entries.map(([k]) => k), ["b", "2", "__proto__", "a"]);
  assert.deepEqual(v.entries[1][1], [true, false, null]);
  const inner = v.entries[3][1];
  assert.ok(inner instanceof JsonObject);
  assert.deepEqual(inner.entries, [["k", -150]]);
});

Deno.test("json: strings and escapes", () => {
  assert.equal(parseJson('"a\\"b\\\\c\\/\\n\\u00e9"'), 'a"b\\c/\n\u00e9');
  assert.equal(parseJson('\uFEFF "x" '), "x");
});

Deno.test("json: syntax errors carry line and column", () => {
  assert.throws(() => parseJson("[\n  1,\n  x]"), /line 3 column 3/);
  for (const bad of ["", "[1,]", '{"a":1,}', "01", "'a'", "[1] 2", '"\\q"', '{"a" 1}', '"abc']) {
    assert.throws(() => parseJson(bad), Error, bad);
  }
  assert.throws(() => parseJson('{"a":1,"a":2}'), /duplicate key "a"/);
});
