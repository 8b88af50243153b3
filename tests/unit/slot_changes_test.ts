// The rules for a changed set of slots on a restored fleet (src/kit/slot_changes.ts).

import assert from "node:assert/strict";
import { describeChange, planCapacityChange, slotMachine } from "../../src/kit/slot_changes.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import type { Slot } from "../../src/config/types.ts";

function slot(id: string, o: Partial<Slot> = {}): Slot {
  return {
    id,
    instanceType: "pve.small",
    zone: "pve1",
    pricePerHour: 0.01,
    resources: [["cpu", "1"]],
    allocatable: [["cpu", "2"], ["memory", "4Gi"]],
    labels: [],
    ...o,
  };
}

function rec(s: Slot, o: Partial<MachineRecord> = {}): MachineRecord {
  return { ...slotMachine(s), ...o };
}

Deno.test("capacity: an unchanged set of slots changes nothing", () => {
  const slots = [slot("a"), slot("b")];
  const c = planCapacityChange(slots.map((s) => rec(s)), slots);
  assert.deepEqual([c.put, c.remove, c.added, c.retired, c.pending], [[], [], 0, 0, 0]);
  assert.equal(describeChange(c), "+0 slots, -0 retired, 0 pending");
});

Deno.test("capacity: new slots appear SPECULATIVE", () => {
  const c = planCapacityChange([rec(slot("a"))], [slot("a"), slot("b"), slot("c")]);
  assert.deepEqual(c.put.map((m) => [m.id, m.state, m.orphan]), [
    ["b", State.Speculative, false],
    ["c", State.Speculative, false],
  ]);
  assert.equal(c.added, 2);
});

Deno.test("capacity: a removed slot leaves now only while SPECULATIVE", () => {
  const saved = [
    rec(slot("spec")),
    rec(slot("idle"), { state: State.Idle, hostRef: "pve1/100" }),
    rec(slot("conf"), { state: State.Configured, hostRef: "pve1/101", cluster: "c1" }),
    rec(slot("failed"), { state: State.Failed, lastError: "x" }),
  ];
  const c = planCapacityChange(saved, []);
  assert.deepEqual(c.remove, ["spec"]);
  // The others stay exactly as they are, marked to leave once deleted.
  assert.deepEqual(c.put, saved.slice(1).map((m) => ({ ...m, orphan: true })));
  assert.equal(describeChange(c), "+0 slots, -4 retired, 3 pending");
});

Deno.test("capacity: machines already without a slot stay pending, and count once", () => {
  const orphan = rec(slot("o"), { state: State.Idle, hostRef: "pve1/7", orphan: true });
  const c = planCapacityChange([orphan], []);
  assert.deepEqual([c.put, c.remove, c.retired, c.pending], [[], [], 0, 1]);
});

Deno.test("capacity: a retired slot that comes back is a slot again", () => {
  const idle = rec(slot("a"), { state: State.Idle, hostRef: "pve1/100", orphan: true });
  const spec = rec(slot("b"), { orphan: true });
  const c = planCapacityChange([idle, spec], [slot("a"), slot("b")]);
  assert.deepEqual(c.put, [{ ...idle, orphan: false }, { ...spec, orphan: false }]);
  assert.equal(c.pending, 0);
});

Deno.test("capacity: a slot naming another type or zone leaves the machine as it is", () => {
  const idle = rec(slot("a"), { state: State.Idle, hostRef: "pve1/100" });
  const spec = rec(slot("b"));
  const c = planCapacityChange([idle, spec], [
    slot("a", { instanceType: "pve.large" }),
    slot("b", { zone: "pve2" }),
  ]);
  assert.deepEqual([c.put, c.remove], [[], []]);
  assert.deepEqual(c.mismatched, [
    { id: "a", was: "pve.small@pve1", now: "pve.large@pve1" },
    { id: "b", was: "pve.small@pve1", now: "pve.small@pve2" },
  ]);
});

Deno.test("capacity: price, resources and labels follow the slot only while SPECULATIVE", () => {
  const spec = rec(slot("a"), { ops: { delete: "op-1" } });
  const idle = rec(slot("b"), { state: State.Idle, hostRef: "pve1/100" });
  const next = { pricePerHour: 0.5, labels: [["team", "x"]] as [string, string][] };
  const c = planCapacityChange([spec, idle], [slot("a", next), slot("b", next)]);
  // The SPECULATIVE one keeps its identity and history; the IDLE one is untouched.
  assert.deepEqual(c.put, [{ ...spec, ...next }]);
  assert.equal(c.refreshed, 1);
});

Deno.test("capacity: the same plan whether the fleet lists its slots in order or not", () => {
  // Slots in order up to a point, then a retired slot, a re-priced one, a new one.
  const slots = Array.from({ length: 40 }, (_, i) => slot(`s${String(i).padStart(2, "0")}`));
  const changed = [
    ...slots.slice(0, 20),
    slot("s20", { pricePerHour: 0.5 }),
    ...slots.slice(22),
    slot("new"),
  ];
  const saved = slots.map((s, i) => rec(s, i === 30 ? { state: State.Idle, hostRef: "h" } : {}));
  const shuffled = [...saved].reverse();
  const inOrder = planCapacityChange(saved, changed);
  const anyOrder = planCapacityChange(shuffled, changed);
  const summary = (c: ReturnType<typeof planCapacityChange>) => ({
    put: c.put.map((m) => [m.id, m.pricePerHour]).sort(),
    remove: [...c.remove].sort(),
    counts: describeChange(c),
    refreshed: c.refreshed,
  });
  assert.deepEqual(summary(inOrder), summary(anyOrder));
  assert.deepEqual(summary(inOrder), {
    put: [["new", 0.01], ["s20", 0.5]],
    remove: ["s21"],
    counts: "+1 slots, -1 retired, 0 pending",
    refreshed: 1,
  });
});
