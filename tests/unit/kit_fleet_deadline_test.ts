import assert from "node:assert/strict";
import { createFleet } from "../../src/kit/fleet.ts";
import { DeadlineError, formatMs, withDeadline } from "../../src/async/deadline.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import { encodeRevision } from "../../src/kit/revision.ts";
import { createMemoryStore } from "../../src/kit/store.ts";
import { slotMachine } from "../../src/kit/slot_changes.ts";

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

Deno.test("fleet: back-to-back capped picks rotate through matching machines", () => {
  const fleet = createFleet(createMemoryStore(), machines(6), 100);
  // Only m4 and m5 remain SPECULATIVE: the pick must alternate, never repeat.
  for (let i = 0; i < 4; i++) fleet.put({ ...fleet.get(`m${i}`)!, state: State.Idle });
  const picks = Array.from({ length: 6 }, () => fleet.select({ states: [1], maxResults: 1 })[0].id);
  for (let i = 1; i < picks.length; i++) assert.notEqual(picks[i], picks[i - 1], picks.join(","));
  assert.deepEqual(new Set(picks), new Set(["m4", "m5"]));
});

Deno.test("fleet: the cursor is applied before the state filter and the cap", () => {
  const fleet = createFleet(createMemoryStore(), machines(5), 100);
  const base = encodeRevision(fleet.revision);
  assert.equal(fleet.select({ states: [], maxResults: 0, sinceRevision: base }).length, 0);
  fleet.put({ ...fleet.get("m1")!, state: State.Idle });
  fleet.put({ ...fleet.get("m3")!, state: State.Creating });
  const delta = fleet.select({ states: [], maxResults: 0, sinceRevision: base });
  assert.deepEqual(delta.map((m) => m.id).sort(), ["m1", "m3"]);
  assert.deepEqual(
    fleet.select({ states: [State.Idle], maxResults: 0, sinceRevision: base }).map((m) => m.id),
    ["m1"],
  );
  assert.equal(fleet.select({ states: [], maxResults: 1, sinceRevision: base }).length, 1);
  // "0", negative and garbage cursors see everything; loaded machines are never at 0.
  for (const c of ["0", "-5", "junk", ""]) {
    assert.equal(
      fleet.select({ states: [], maxResults: 0, sinceRevision: new TextEncoder().encode(c) })
        .length,
      5,
      c,
    );
  }
});

Deno.test("fleet: remove drops the machine and moves the revision", () => {
  const fleet = createFleet(createMemoryStore(), machines(3), 7);
  fleet.remove("m1");
  assert.equal(fleet.size, 2);
  assert.equal(fleet.revision, 8);
  assert.equal(fleet.get("m1"), undefined);
  assert.deepEqual(fleet.select({ states: [], maxResults: 0 }).map((m) => m.id), ["m0", "m2"]);
  fleet.remove("nope");
  assert.equal(fleet.revision, 8, "removing an unknown id changes nothing");
});

Deno.test("deadline: work that ignores its signal still fails at the deadline", async () => {
  let aborted: unknown = null;
  let lateResolve: (v: string) => void = () => {};
  const p = withDeadline(30, "configure timed out after 30ms", (signal) => {
    signal.addEventListener("abort", () => aborted = signal.reason);
    return new Promise<string>((resolve) => lateResolve = resolve);
  });
  await assert.rejects(
    p,
    (e) => e instanceof DeadlineError && /timed out after 30ms/.test(e.message),
  );
  assert.ok(aborted instanceof DeadlineError, "the work was told");
  lateResolve("too late"); // must not surface anywhere
});

Deno.test("deadline: results and errors pass through; work starts after the caller's step", async () => {
  const order: string[] = [];
  const p = withDeadline(1000, "x", () => {
    order.push("work");
    return Promise.resolve(42);
  });
  order.push("caller");
  assert.equal(await p, 42);
  assert.deepEqual(order, ["caller", "work"]);
  await assert.rejects(
    withDeadline(1000, "x", () => {
      throw new Error("sync throw");
    }),
    /sync throw/,
  );
  assert.equal(formatMs(8 * 60_000), "8m0s");
  assert.equal(formatMs(2000), "2s");
  assert.equal(formatMs(150), "150ms");
});
