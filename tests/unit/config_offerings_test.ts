import assert from "node:assert/strict";
import {
  builtinOfferings,
  expandSlots,
  parseOfferings,
  slotId,
  zonesOf,
} from "../../src/config/offerings.ts";
import { builtinCatalog } from "../../src/config/catalog.ts";
import type { Pricing } from "../../src/config/pricing.ts";

const catalog = builtinCatalog({ kind: "vmid", vmid: 9000 });
const pricing: Pricing = { explicit: new Map(), perVcpuHour: 0.003, perGibHour: 0.0008 };
const fakeZones = ["pve-a", "pve-b"];

function split(seed: number, zones = fakeZones): [string, string, number][] {
  return builtinOfferings(catalog, zones, seed).map((o) => [o.instanceType, o.zone, o.count]);
}

Deno.test("offerings: built-in split over four buckets", () => {
  assert.deepEqual(split(32), [
    ["pve.large", "pve-a", 8],
    ["pve.large", "pve-b", 8],
    ["pve.xlarge", "pve-a", 8],
    ["pve.xlarge", "pve-b", 8],
  ]);
  assert.deepEqual(split(10).map((b) => b[2]), [3, 3, 2, 2]);
  assert.deepEqual(split(2), [["pve.large", "pve-a", 1], ["pve.large", "pve-b", 1]]);
  assert.deepEqual(split(1), [["pve.large", "pve-a", 1]]);
  assert.deepEqual(split(0), []);
});

Deno.test("offerings: built-in uses the first two nodes; one node gives two buckets", () => {
  assert.deepEqual(split(8, ["n1", "n2", "n3"]).map((b) => b[1]), ["n1", "n2", "n1", "n2"]);
  assert.deepEqual(split(5, ["solo"]), [["pve.large", "solo", 3], ["pve.xlarge", "solo", 2]]);
});

Deno.test("offerings: built-in with a one-type catalog", () => {
  const one = new Map([["only", {
    name: "only",
    vcpu: 1,
    memoryMib: 1024,
    template: { kind: "vmid", vmid: 100 } as const,
  }]]);
  assert.deepEqual(builtinOfferings(one, fakeZones, 3).map((o) => o.count), [2, 1]);
});

Deno.test("offerings: built-in slots are fully described", () => {
  const slots = expandSlots(builtinOfferings(catalog, fakeZones, 32), catalog, "certify", pricing);
  assert.equal(slots.length, 32);
  assert.equal(slots[0].id, "certify/OnDemand/pve.large/pve-a/000");
  assert.equal(slots[7].id, "certify/OnDemand/pve.large/pve-a/007");
  assert.equal(slots[8].id, "certify/OnDemand/pve.large/pve-b/000");
  assert.equal(slots[31].id, "certify/OnDemand/pve.xlarge/pve-b/007");
  assert.equal(new Set(slots.map((s) => s.id)).size, 32);
  assert.deepEqual(slots[0], {
    id: "certify/OnDemand/pve.large/pve-a/000",
    instanceType: "pve.large",
    zone: "pve-a",
    pricePerHour: 0.0368,
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [],
  });
  assert.equal(slots[31].pricePerHour, 0.0736);
  assert.deepEqual(slots[31].allocatable, [["cpu", "16"], ["memory", "32Gi"]]);
  // Slots of one offering share their maps, frozen, so no machine can change another's.
  for (const pairs of [slots[0].resources, slots[0].allocatable, slots[0].labels]) {
    assert.ok(Object.isFrozen(pairs) && pairs.every((p) => Object.isFrozen(p)));
  }
});

Deno.test("offerings: slot id pads to at least three digits", () => {
  assert.equal(slotId("p", "t", "z", 5), "p/OnDemand/t/z/005");
  assert.equal(slotId("p", "t", "z", 1234), "p/OnDemand/t/z/1234");
});

Deno.test("offerings: file parsing keeps order, labels, resources and __proto__", () => {
  const text = `[
    {"instance_type": "pve.small", "zone": "n2", "count": 2,
     "resources": {"nvidia.com/gpu": "1", "2": "x"},
     "labels": {"__proto__": "kept", "team": "a", "10": "ten"}},
    {"instance_type": "pve.large", "zone": "n1", "capacity_type": "on-demand", "count": 1},
    {"instance_type": "pve.small", "zone": "n2", "capacity_type": "ON_DEMAND", "count": 2}
  ]`;
  const offerings = parseOfferings(text, catalog, ["n1", "n2"]);
  assert.deepEqual(offerings[0].labels, [["__proto__", "kept"], ["team", "a"], ["10", "ten"]]);
  assert.deepEqual(offerings[0].resources, [["nvidia.com/gpu", "1"], ["2", "x"]]);
  assert.deepEqual(offerings[1].resources, []);
  assert.deepEqual(offerings[1].labels, []);
  assert.deepEqual(zonesOf(offerings), ["n2", "n1"]);
  const slots = expandSlots(offerings, catalog, "dc1", pricing);
  assert.deepEqual(slots.map((s) => s.id), [
    "dc1/OnDemand/pve.small/n2/000",
    "dc1/OnDemand/pve.small/n2/001",
    "dc1/OnDemand/pve.large/n1/000",
    "dc1/OnDemand/pve.small/n2/002",
    "dc1/OnDemand/pve.small/n2/003",
  ]);
  assert.deepEqual(slots[0].labels[0], ["__proto__", "kept"]);
  assert.equal(Object.getPrototypeOf(slots[0].labels), Array.prototype);
});

Deno.test("offerings: on-demand spellings and absent capacity type are accepted", () => {
  for (
    const ct of ["on_demand", "on-demand", "ondemand", "ON_DEMAND", "On-Demand", "OnDemand", ""]
  ) {
    const text = JSON.stringify([{
      instance_type: "pve.small",
      zone: "z",
      capacity_type: ct,
      count: 1,
    }]);
    assert.equal(parseOfferings(text, catalog, null).length, 1, ct);
  }
  const nullCt = '[{"instance_type": "pve.small", "zone": "z", "capacity_type": null, "count": 1}]';
  assert.equal(parseOfferings(nullCt, catalog, null).length, 1);
});

Deno.test("offerings: empty array is no slots", () => {
  assert.deepEqual(parseOfferings("[]", catalog, null), []);
});

Deno.test("offerings: invalid files are rejected", () => {
  const base = { instance_type: "pve.small", zone: "n1", count: 1 };
  const bad: [unknown, RegExp][] = [
    [{}, /want an array/],
    [[1], /offering 0: want an object/],
    [[{ ...base, instance_type: "" }], /instance_type is empty/],
    [[{ ...base, instance_type: undefined }], /instance_type is required/],
    [[{ ...base, instance_type: 3 }], /instance_type must be a string/],
    [[{ ...base, zone: "" }], /zone is empty/],
    [[{ ...base, zone: "a/b" }], /must not contain/],
    [[{ ...base, instance_type: "pve.huge" }], /unknown instance type "pve.huge"/],
    [[{ ...base, count: 0 }], /count must be a positive integer, got 0/],
    [[{ ...base, count: -1 }], /count must be a positive integer/],
    [[{ ...base, count: 1.5 }], /count must be a positive integer/],
    [[{ ...base, count: "2" }], /count must be a positive integer/],
    [[{ ...base, count: undefined }], /count must be a positive integer/],
    [[{ ...base, capacity_type: "spot" }], /"spot" is not supported/],
    [[{ ...base, capacity_type: "SPOT" }], /not supported/],
    [[{ ...base, capacity_type: "reserved" }], /not supported/],
    [[{ ...base, capacity_type: "bare_metal" }], /not supported/],
    [[{ ...base, capacity_type: "preemptible" }], /unknown/],
    [[{ ...base, capacity_type: 1 }], /must be a string/],
    [[{ ...base, resources: { cpu: 1 } }], /resources: value of "cpu" must be a string/],
    [[{ ...base, resources: [] }], /resources must be an object/],
    [[{ ...base, labels: { a: true } }], /labels: value of "a" must be a string/],
    [[{ ...base, labels: { "": "x" } }], /empty key/],
    [[base, { ...base, zone: "n9" }], /offering 1: zone "n9" is not one of --nodes/],
    [
      [{ ...base, resoruces: {} }],
      /offering 0: unknown field "resoruces" \(did you mean "resources"\?\)$/,
    ],
    [
      [base, { ...base, colour: "x" }],
      /offering 1: unknown field "colour" \(known: instance_type, zone, count,/,
    ],
  ];
  for (const [doc, re] of bad) {
    assert.throws(
      () => parseOfferings(JSON.stringify(doc), catalog, ["n1", "n2"]),
      re,
      JSON.stringify(doc),
    );
  }
  assert.throws(() => parseOfferings("[", catalog, null), /but the file ends at line 1 column 2/);
});

Deno.test("offerings: well-known label keys are rejected", () => {
  // The B801 list, verbatim from conformance-catalog.md.
  const keys = ("instance-type instance_type instanceType zone availability-zone " +
    "availability_zone capacity-type capacity_type capacityType").split(" ");
  for (const key of keys) {
    const text = JSON.stringify([{
      instance_type: "pve.small",
      zone: "z",
      count: 1,
      labels: { [key]: "v" },
    }]);
    assert.throws(() => parseOfferings(text, catalog, null), /is reserved/, key);
  }
});

Deno.test("offerings: any zone is fine on the fake backend", () => {
  const text = '[{"instance_type": "pve.small", "zone": "anywhere", "count": 1}]';
  assert.equal(parseOfferings(text, catalog, null)[0].zone, "anywhere");
});
