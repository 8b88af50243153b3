// Stopping: close() and finish() (src/kit/kit.ts, src/kit/inflight.ts), in-process against the kit
// (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { State } from "../../src/kit/model.ts";
import { startTestKit } from "./scripted_backend.ts";
import { nextTurn, settlesNow } from "./watched_store.ts";
import { rejects } from "./kit_helpers.ts";

Deno.test("close: without a wait it returns at once; a later completion is dropped", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  await t.call("configure", "m0");
  const job = await t.backend.next("configure");
  await t.kit.close();
  assert.ok(t.store.closed, "the store is closed");
  const writes = t.store.writes;
  job.succeed();
  await nextTurn();
  assert.equal(t.store.writes, writes, "nothing is written after close");
  assert.equal(t.store.machine("m0")!.state, State.Configuring);
});

Deno.test("close: with a wait, running transitions finish and are persisted first", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  await t.call("configure", "m0");
  const job = await t.backend.next("configure");
  const closing = t.kit.close(60_000);
  assert.equal(await settlesNow(closing), false, "close waits for the running configure");
  assert.equal(t.store.closed, false);
  job.succeed();
  await closing;
  assert.equal(t.store.machine("m0")!.state, State.Configured);
  assert.ok(t.store.closed);
});

Deno.test("close: the wait is bounded; what finishes after it is dropped", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  await t.call("configure", "m0");
  const job = await t.backend.next("configure");
  await t.kit.close(5); // the kit's own timer ends the wait
  assert.ok(t.store.closed);
  assert.equal(job.settled, false);
  job.succeed();
  await nextTurn();
  assert.equal(t.store.machine("m0")!.state, State.Configuring);
});

Deno.test("close: with nothing running, a long wait does not delay it", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  assert.equal(await settlesNow(t.kit.close(60_000)), true);
});

Deno.test("finish: lifecycle calls are refused UNAVAILABLE and change nothing; reads still answer", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  await t.call("create", "m1");
  const job = await t.backend.next("create", "m1");
  const ac = new AbortController();
  const finishing = t.kit.finish(ac.signal);
  assert.equal(await settlesNow(finishing), false, "finish waits for the running create");
  const writes = t.store.writes;
  await rejects(t.call("configure", "m0"), Code.Unavailable, "configure while finishing");
  await rejects(t.call("create", "m2"), Code.Unavailable, "create while finishing");
  await rejects(t.kit.reconcile(new AbortController().signal), Code.Unavailable, "reconcile");
  assert.equal(t.store.writes, writes, "a refused call writes nothing");
  assert.equal((await t.kit.get("m2")).state, State.Speculative);
  assert.equal((await t.kit.list({ states: [], maxResults: 0 })).machines.length, 4);
  job.succeed();
  assert.deepEqual(await finishing, [], "nothing left running");
  assert.equal((await t.kit.get("m1")).state, State.Idle);
});

Deno.test("finish: an abort ends the wait and names the machines still running", async () => {
  await using t = await startTestKit();
  await t.call("create", "m0");
  await t.call("create", "m1");
  await t.backend.next("create", "m0");
  (await t.backend.next("create", "m1")).succeed();
  await t.store.until("m1", State.Idle);
  await nextTurn(); // the finished one leaves the running set just after its write
  assert.equal(t.kit.running, 1);
  const ac = new AbortController();
  const finishing = t.kit.finish(ac.signal);
  ac.abort();
  assert.deepEqual(await finishing, ["m0"]);
});
