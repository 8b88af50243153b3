// Idempotency: replays and parallel calls (src/kit/dispatch.ts), in-process against the kit
// (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { State } from "../../src/kit/model.ts";
import { NO_TOKEN, startTestKit, TARGET, tok } from "./scripted_backend.ts";
import type { Kind } from "./scripted_backend.ts";
import { nextTurn } from "./watched_store.ts";
import { enc, untouched } from "./kit_helpers.ts";

Deno.test("idempotency: parallel identical calls collapse into one operation (B401–B403, B409)", async () => {
  await using t = await startTestKit();
  for (const kind of ["create", "configure", "drain", "delete"] as Kind[]) {
    const acks = await Promise.all(Array.from({ length: 16 }, () => t.call(kind, "m0")));
    const ops = new Set(acks.map((a) => a.operationId));
    assert.equal(ops.size, 1, `${kind}: one operation id`);
    assert.notEqual([...ops][0], "");
    const call = await t.backend.next(kind);
    await nextTurn();
    assert.equal(t.backend.calls.filter((c) => c.kind === kind).length, 1, `${kind}: one job`);
    call.succeed();
    await t.store.until("m0", TARGET[kind]);
  }
});

Deno.test("idempotency: a replay returns the same op in flight and at the target, whatever the token (B205, B206)", async () => {
  await using t = await startTestKit();
  const x = await t.call("create", "m0");
  assert.equal(x.machine.state, State.Creating);
  const inFlight = await t.call("create", "m0", tok("fresh", 1, 1));
  assert.equal(inFlight.operationId, x.operationId);
  assert.equal(inFlight.machine.state, State.Creating);
  (await t.backend.next("create")).succeed("zone-a/700");
  await t.store.until("m0", State.Idle);
  const { revision } = await t.kit.list({ states: [], maxResults: 0 });
  const atTarget = await t.call("create", "m0", tok("fresh", 1, 2));
  assert.equal(atTarget.operationId, x.operationId);
  // The ack carries the machine as it stands now.
  assert.equal(atTarget.machine.state, State.Idle);
  assert.equal(atTarget.machine.hostRef, "zone-a/700");
  // The fresh token's mark is the only thing written.
  assert.deepEqual(t.store.fence("fresh", "m0"), { epoch: 1n, seq: 2n });
  assert.equal((await t.kit.list({ states: [], maxResults: 0 })).revision, revision);
  const check = await untouched(t);
  const unfencedReplay = await t.call("create", "m0");
  assert.equal(unfencedReplay.operationId, x.operationId);
  await check("an unfenced replay");
  const y = await t.step("configure", "m0");
  const replay = await t.call("configure", "m0");
  assert.equal(replay.operationId, y.operationId);
  assert.notEqual(y.operationId, x.operationId);
  assert.equal(replay.machine.state, State.Configured);
});

Deno.test("idempotency: a new op once the machine has moved on; op history is kept (B214, B1203)", async () => {
  await using t = await startTestKit();
  const a = await t.step("create", "m0");
  const b = await t.step("configure", "m0");
  const c = await t.step("drain", "m0");
  const d = await t.step("configure", "m0");
  const e = await t.step("drain", "m0");
  const ops = [a, b, c, d, e].map((x) => x.operationId);
  assert.equal(new Set(ops).size, 5, `five distinct ops: ${ops}`);
  assert.equal((await t.call("drain", "m0")).operationId, e.operationId, "last drain replayed");
  assert.equal((await t.call("create", "m0")).operationId, a.operationId, "create at IDLE");
  const f = await t.step("delete", "m0");
  assert.equal((await t.call("delete", "m0")).operationId, f.operationId, "delete at SPECULATIVE");
  const g = await t.call("create", "m0");
  assert.equal(g.machine.state, State.Creating, "a re-create starts a new transition");
  assert.ok(![...ops, f.operationId].includes(g.operationId), "with a new op id");
});

Deno.test("idempotency: op ids differ across machines (B407)", async () => {
  await using t = await startTestKit({ machines: 8 });
  const acks = await Promise.all(t.ids.map((id) => t.call("create", id)));
  assert.equal(new Set(acks.map((a) => a.operationId)).size, 8);
});

Deno.test("idempotency: a replay with other arguments starts nothing and changes nothing", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  const first = await t.kit.configure({
    machineId: "m0",
    token: NO_TOKEN,
    clusterId: "first",
    bootstrap: enc.encode("one"),
    shardMetadata: [["a", "1"]],
  });
  const second = await t.kit.configure({
    machineId: "m0",
    token: NO_TOKEN,
    clusterId: "second",
    bootstrap: enc.encode("two"),
    shardMetadata: [["b", "2"]],
  });
  assert.equal(second.operationId, first.operationId);
  assert.equal(second.machine.cluster, "first");
  assert.deepEqual(second.machine.shardMetadata, [["a", "1"]]);
  const job = await t.backend.next("configure");
  assert.equal(job.clusterId, "first");
  job.succeed();
  const done = await t.store.until("m0", State.Configured);
  assert.equal(done.cluster, "first");
  assert.equal(t.backend.calls.filter((c) => c.kind === "configure").length, 1);
});
