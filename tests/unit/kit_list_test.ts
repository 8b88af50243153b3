// Get and List: the states filter, the cap, the cursor and the revision (src/kit/fleet.ts), in-
// process against the kit (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { State, STATE_NAMES } from "../../src/kit/model.ts";

import { startTestKit, tok } from "./scripted_backend.ts";
import type { TestKit, TestKitOptions } from "./scripted_backend.ts";
import { enc, ids, rejects, steps } from "./kit_helpers.ts";

/** m0 IDLE, m1 CONFIGURED, m2 CREATING, the rest SPECULATIVE. */
async function mixedFleet(opts: TestKitOptions = {}): Promise<TestKit> {
  const t = await startTestKit({ machines: 6, ...opts });
  await t.step("create", "m0");
  await steps(t, "m1", ["create", "configure"]);
  await t.call("create", "m2");
  return t;
}

Deno.test("list: the states filter (B901, ListFiltersByState)", async () => {
  await using t = await mixedFleet();
  const all = await t.kit.list({ states: [], maxResults: 0 });
  assert.deepEqual(ids(all.machines), t.ids);
  const cases: [State[], string[]][] = [
    [[State.Idle], ["m0"]],
    [[State.Configured], ["m1"]],
    [[State.Creating], ["m2"]],
    [[State.Speculative], ["m3", "m4", "m5"]],
    [[State.Failed], []],
    [[State.Speculative, State.Idle, State.Configured], ["m0", "m1", "m3", "m4", "m5"]],
  ];
  for (const [states, want] of cases) {
    const got = await t.kit.list({ states, maxResults: 0 });
    assert.deepEqual(ids(got.machines), want, states.map((s) => STATE_NAMES[s]).join(","));
    assert.equal(got.revision, all.revision, "every page carries the head revision");
  }
});

Deno.test("list: max_results caps, zero or less is no cap, and capped picks rotate (B302, B902)", async () => {
  await using t = await mixedFleet();
  for (const n of [1, 2, 3]) {
    const got = await t.kit.list({ states: [], maxResults: n });
    assert.equal(got.machines.length, n);
    assert.equal(new Set(ids(got.machines)).size, n);
  }
  assert.equal((await t.kit.list({ states: [], maxResults: 0 })).machines.length, 6);
  assert.equal((await t.kit.list({ states: [], maxResults: -1 })).machines.length, 6);
  // Back-to-back single picks of SPECULATIVE machines never repeat and cover them all.
  const picks: string[] = [];
  for (let i = 0; i < 6; i++) {
    picks.push((await t.kit.list({ states: [State.Speculative], maxResults: 1 })).machines[0].id);
  }
  for (let i = 1; i < picks.length; i++) assert.notEqual(picks[i], picks[i - 1], picks.join(","));
  assert.deepEqual([...new Set(picks)].sort(), ["m3", "m4", "m5"]);
});

Deno.test("list: since_revision returns exactly what changed since the cursor (B903–B907, B1102)", async () => {
  await using t = await startTestKit({ machines: 6 });
  const r0 = await t.kit.list({ states: [], maxResults: 0 });
  assert.ok(r0.revision > 0, "the first revision is non-empty");
  const cursor = (rev: number) => enc.encode(String(rev));
  assert.deepEqual(
    (await t.kit.list({ states: [], maxResults: 0, sinceRevision: cursor(r0.revision) })).machines,
    [],
  );

  await t.step("create", "m1");
  await t.step("create", "m4");
  const r1 = await t.kit.list({ states: [], maxResults: 0 });
  assert.notEqual(r1.revision, r0.revision);
  const delta = await t.kit.list({ states: [], maxResults: 0, sinceRevision: cursor(r0.revision) });
  assert.deepEqual(ids(delta.machines), ["m1", "m4"]);
  assert.equal(delta.revision, r1.revision, "the head revision, not the cursor");
  // The cursor applies before the state filter and the cap.
  const filtered = await t.kit.list({
    states: [State.Idle, State.Speculative],
    maxResults: 1,
    sinceRevision: cursor(r0.revision),
  });
  assert.equal(filtered.machines.length, 1);
  assert.ok(["m1", "m4"].includes(filtered.machines[0].id));
  assert.equal(filtered.revision, r1.revision);

  await t.call("configure", "m4");
  const d2 = await t.kit.list({ states: [], maxResults: 0, sinceRevision: cursor(r1.revision) });
  assert.deepEqual(ids(d2.machines), ["m4"], "a transitional state is a change");
  // A cursor ahead of the head is an empty delta, never an error.
  const ahead = await t.kit.list({
    states: [],
    maxResults: 0,
    sinceRevision: cursor(d2.revision + 1000),
  });
  assert.deepEqual(ahead.machines, []);
});

Deno.test("list: a cursor that is not a strict decimal is a full list (B906, B909)", async () => {
  await using t = await startTestKit({ machines: 3 });
  const { revision } = await t.kit.list({ states: [], maxResults: 0 });
  const r = String(revision);
  const bad: Uint8Array[] = [
    new Uint8Array(),
    enc.encode("not-a-real-cursor"),
    new Uint8Array([0x00, 0xff, 0x10, 0x42, 0x7f]),
    new Uint8Array(4096).fill(0xde),
    enc.encode(r + "!"),
    enc.encode("~" + r),
    new Uint8Array([...enc.encode(r), 0x00, 0xff]),
    enc.encode(` ${r}`),
    enc.encode("0x1f"),
    enc.encode("0"),
    enc.encode("-5"),
  ];
  for (const c of bad) {
    const got = await t.kit.list({ states: [], maxResults: 0, sinceRevision: c });
    assert.deepEqual(ids(got.machines), t.ids, `cursor ${JSON.stringify([...c].slice(0, 8))}`);
  }
});

Deno.test("list: the revision moves on changes only (B904, B905, B908)", async () => {
  await using t = await startTestKit();
  const rev = async () => (await t.kit.list({ states: [], maxResults: 0 })).revision;
  const r0 = await rev();
  await t.kit.get("m0");
  await t.kit.list({ states: [State.Idle], maxResults: 1 });
  assert.equal(await rev(), r0, "reads");
  await rejects(t.call("configure", "m0"), Code.Internal, "out of position");
  await rejects(t.call("create", "ghost"), Code.NotFound, "unknown");
  assert.equal(await rev(), r0, "rejected calls");
  await rejects(t.call("drain", "m0", tok("s", 1, 1)), Code.Internal, "fenced, out of position");
  assert.equal(await rev(), r0, "a fence-only update");
  const acked = await t.call("create", "m0");
  const r1 = await rev();
  assert.ok(r1 > r0, "entering CREATING");
  await t.call("create", "m0");
  assert.equal(await rev(), r1, "a replay");
  (await t.backend.next("create")).succeed();
  await t.store.until("m0", State.Idle);
  const r2 = await rev();
  assert.ok(r2 > r1, "completing");
  assert.equal((await t.call("create", "m0")).operationId, acked.operationId);
  assert.equal(await rev(), r2, "a replay at the target");
});
