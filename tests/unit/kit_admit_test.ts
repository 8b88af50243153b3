// The backend's admission of a Create (Backend.admit, docs/design.md#node-capacity):
// asked after the fence and the state checks, just before a legal Create
// starts; a refusal is RESOURCE_EXHAUSTED with the backend's words and leaves
// the machine SPECULATIVE with nothing started. The kit knows nothing of what
// the backend counts.

import assert from "node:assert/strict";
import { Code, KitError } from "../../src/kit/errors.ts";
import { State } from "../../src/kit/model.ts";
import { startTestKit, tok } from "./scripted_backend.ts";
import { nextTurn } from "./watched_store.ts";

const NO_ROOM = "zone zone-a: no room for t.large";

async function refusal(p: Promise<unknown>): Promise<KitError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof KitError, `expected a KitError, got ${e}`);
    return e;
  }
  assert.fail("expected a refusal, got OK");
}

Deno.test("admission: a refused Create is RESOURCE_EXHAUSTED with the backend's words; the machine stays SPECULATIVE, nothing starts", async () => {
  await using t = await startTestKit();
  t.backend.setAdmission((slot) => slot.zone === "zone-a" ? NO_ROOM : null);
  const before = await t.kit.list({ states: [], maxResults: 0 });
  const err = await refusal(t.call("create", "m0"));
  assert.equal(err.code, Code.ResourceExhausted);
  assert.equal(err.message, NO_ROOM);
  await nextTurn();
  assert.equal(t.backend.calls.length, 0, "no create work");
  const m = await t.kit.get("m0");
  assert.equal(m.state, State.Speculative);
  assert.equal(m.lastError, "");
  assert.equal(m.ops.create, undefined, "no operation id was handed out");
  const after = await t.kit.list({ states: [], maxResults: 0 });
  assert.equal(after.machines.length, before.machines.length, "List keeps every slot");
  assert.equal(after.revision, before.revision, "nothing changed");
  assert.deepEqual(t.backend.admissions, [
    { machineId: "m0", instanceType: "t.large", zone: "zone-a" },
  ]);
  // Another zone has room: admitted, and its Create starts.
  const ack = await t.call("create", "m1");
  assert.equal(ack.machine.state, State.Creating);
  assert.equal((await t.backend.next("create", "m1")).slot?.zone, "zone-b");
  // Room again in zone-a: the same machine's Create is admitted.
  t.backend.setAdmission(null);
  assert.equal((await t.call("create", "m0")).machine.state, State.Creating);
});

Deno.test("admission: asked only for a legal Create start, after the fence and the state checks", async () => {
  await using t = await startTestKit();
  t.backend.setAdmission(() => NO_ROOM);
  // Fenced: FAILED_PRECONDITION, not asked (the mark still moves, as for any refusal).
  await t.call("delete", "m0", tok("s", 5, 5)).catch(() => {});
  const fenced = await refusal(t.call("create", "m0", tok("s", 5, 5)));
  assert.equal(fenced.code, Code.FailedPrecondition);
  // Unknown machine: NOT_FOUND, not asked.
  assert.equal((await refusal(t.call("create", "nope"))).code, Code.NotFound);
  assert.equal(t.backend.admissions.length, 0);
  // A refusal after a passing token still moves its mark, like every other refusal.
  assert.equal(
    (await refusal(t.call("create", "m0", tok("s", 5, 6)))).code,
    Code.ResourceExhausted,
  );
  assert.deepEqual(t.store.fence("s", "m0"), { epoch: 5n, seq: 6n });
  // Admitted once: the replay of the same Create is answered without asking again.
  t.backend.setAdmission(null);
  const ack = await t.call("create", "m2");
  t.backend.setAdmission(() => NO_ROOM);
  const asked = t.backend.admissions.length;
  assert.equal((await t.call("create", "m2")).operationId, ack.operationId);
  (await t.backend.next("create", "m2")).succeed();
  await t.store.until("m2", State.Idle);
  assert.equal((await t.call("create", "m2")).operationId, ack.operationId, "replay at IDLE");
  // Other kinds are never admitted; out of position the position check answers (INTERNAL).
  await t.call("delete", "m2");
  assert.equal((await refusal(t.call("create", "m2"))).code, Code.Internal);
  assert.equal(t.backend.admissions.length, asked);
});
