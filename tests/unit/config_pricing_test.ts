import assert from "node:assert/strict";
import { parsePrice, parsePrices, priceOf, type Pricing } from "../../src/config/pricing.ts";
import { builtinCatalog } from "../../src/config/catalog.ts";

const catalog = builtinCatalog({ kind: "vmid", vmid: 9000 });
const defaults: Pricing = { explicit: new Map(), perVcpuHour: 0.003, perGibHour: 0.0008 };

Deno.test("pricing: synthetic price is exact, without float noise", () => {
  assert.equal(priceOf(defaults, catalog, "pve.small"), 0.0092);
  assert.equal(priceOf(defaults, catalog, "pve.medium"), 0.0184);
  assert.equal(priceOf(defaults, catalog, "pve.large"), 0.0368);
  assert.equal(priceOf(defaults, catalog, "pve.xlarge"), 0.0736);
});

Deno.test("pricing: explicit entry wins; unknown type prices 0", () => {
  const pricing = { ...defaults, explicit: parsePrices("pve.large=0.5, pve.small=0") };
  assert.equal(priceOf(pricing, catalog, "pve.large"), 0.5);
  assert.equal(priceOf(pricing, catalog, "pve.small"), 0);
  assert.equal(priceOf(pricing, catalog, "pve.xlarge"), 0.0736);
  assert.equal(priceOf(pricing, catalog, "nope"), 0);
  assert.equal(priceOf({ ...pricing, explicit: parsePrices("nope=2") }, catalog, "nope"), 2);
});

Deno.test("pricing: --prices parsing", () => {
  assert.deepEqual([...parsePrices("")], []);
  assert.deepEqual([...parsePrices("a=1,b=2.5,")], [["a", 1], ["b", 2.5]]);
  assert.deepEqual([...parsePrices("__proto__=1")], [["__proto__", 1]]);
  for (
    const bad of [
      "a",
      "=1",
      "a=",
      "a=x",
      "a=-1",
      "a=Infinity",
      "a=NaN",
      "a=1e999",
      "a=1,a=2",
      "a=0x10",
    ]
  ) {
    assert.throws(() => parsePrices(bad), Error, bad);
  }
});

Deno.test("pricing: single price values", () => {
  assert.equal(parsePrice("0.0030"), 0.003);
  assert.equal(parsePrice("1e-3"), 0.001);
  assert.equal(parsePrice("0"), 0);
  assert.throws(() => parsePrice("-0.1"), /negative/);
  assert.throws(() => parsePrice(""), /invalid/);
  assert.throws(() => parsePrice("1e400"), /not finite/);
});
