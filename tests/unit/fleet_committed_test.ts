// The fleet's committed view: what reads answer while the state store cannot
// commit. It must show exactly the committed records, last-change revisions
// and revision, whatever is in flight (puts, removals, re-adds).

import assert from "node:assert/strict";
import { createFleet } from "../../src/kit/fleet.ts";
import { slotMachine } from "../../src/kit/slot_changes.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import { encodeRevision } from "../../src/kit/revision.ts";
import { createMemoryStore } from "../../src/kit/store.ts";
import type { StateStore } from "../../src/kit/store.ts";

/** A store that commits only when told to: `commit()` makes everything handed over so far committed. */
function heldStore(): StateStore & { commit(): void } {
  let handed = 0;
  let committed = 0;
  const count = () => void handed++;
  return {
    ...createMemoryStore(),
    putMachine: count,
    deleteMachine: count,
    putFence: count,
    putRevision: count,
    handFirst: count,
    get handedCount() {
      return handed;
    },
    get committedCount() {
      return committed;
    },
    commit() {
      committed = handed;
    },
  };
}

function machines(n: number): MachineRecord[] {
  return Array.from({ length: n }, (_, i) =>
    slotMachine({
      id: `m${i}`,
      instanceType: "pve.large",
      zone: "pve-a",
      pricePerHour: 0,
      resources: [],
      allocatable: [],
      labels: [],
    }));
}

const all = { states: [], maxResults: 0 };
const ids = (ms: MachineRecord[]) => ms.map((m) => m.id);

Deno.test("fleet: the committed view shows nothing in flight, then everything once committed", () => {
  const store = heldStore();
  const fleet = createFleet(store, machines(3), 100);
  const c = fleet.committedView;
  fleet.put({ ...fleet.get("m0")!, state: State.Creating });
  fleet.put({ ...fleet.get("m0")!, state: State.Idle });
  fleet.remove("m1");
  fleet.put({ ...machines(4)[3], state: State.Idle }); // a new machine

  assert.equal(fleet.revision, 104);
  assert.equal(c.revision, 100);
  assert.equal(c.get("m0")!.state, State.Speculative);
  assert.ok(c.get("m1"), "a removal in flight is still committed");
  assert.equal(c.get("m3"), undefined, "an addition in flight is not");
  assert.deepEqual(ids(c.select(all)), ["m0", "m1", "m2"]);
  assert.deepEqual(c.select({ ...all, sinceRevision: encodeRevision(100) }), []);
  assert.deepEqual(ids(fleet.select(all)), ["m0", "m2", "m3"]);

  store.commit();
  assert.equal(c.revision, 104);
  assert.equal(c.get("m0")!.state, State.Idle);
  assert.equal(c.get("m1"), undefined);
  assert.deepEqual(ids(c.select(all)), ["m0", "m2", "m3"]);
  assert.deepEqual(ids(c.select({ ...all, sinceRevision: encodeRevision(100) })), ["m0", "m3"]);
  assert.deepEqual(ids(fleet.select(all)), ids(c.select(all)));
});

Deno.test("fleet: changes committed in steps move the committed view step by step", () => {
  const store = heldStore();
  const fleet = createFleet(store, machines(2), 10);
  fleet.put({ ...fleet.get("m0")!, state: State.Creating });
  store.commit();
  fleet.put({ ...fleet.get("m0")!, state: State.Idle });
  assert.equal(fleet.committedView.get("m0")!.state, State.Creating);
  assert.equal(fleet.committedView.revision, 11);
  assert.deepEqual(
    ids(fleet.committedView.select({ ...all, sinceRevision: encodeRevision(10) })),
    ["m0"],
  );
  store.commit();
  assert.equal(fleet.committedView.get("m0")!.state, State.Idle);
  assert.equal(fleet.committedView.revision, 12);
});

Deno.test("fleet: a machine removed and added back while in flight is listed once", () => {
  const store = heldStore();
  const fleet = createFleet(store, machines(2), 10);
  fleet.remove("m1");
  fleet.put({ ...machines(2)[1], state: State.Idle });
  assert.deepEqual(ids(fleet.select(all)), ["m0", "m1"]);
  assert.deepEqual(ids(fleet.committedView.select(all)), ["m0", "m1"]);
  assert.equal(fleet.committedView.get("m1")!.state, State.Speculative);
  store.commit();
  assert.deepEqual(ids(fleet.committedView.select(all)), ["m0", "m1"]);
  assert.equal(fleet.committedView.get("m1")!.state, State.Idle);
  fleet.remove("m1");
  store.commit();
  assert.deepEqual(ids(fleet.select(all)), ["m0"]);
  assert.deepEqual(ids(fleet.committedView.select(all)), ["m0"]);
});

Deno.test("fleet: over a store that commits as it is handed changes, the committed view is the fleet", () => {
  const fleet = createFleet(createMemoryStore(), machines(2), 10);
  fleet.put({ ...fleet.get("m0")!, state: State.Idle });
  fleet.remove("m1");
  assert.equal(fleet.committedView.revision, 12);
  assert.deepEqual(fleet.committedView.select(all), fleet.select(all));
});
