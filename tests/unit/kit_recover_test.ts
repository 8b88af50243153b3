// An operator's recovery of a FAILED machine (src/kit/recover.ts), in-process against the kit
// (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import { backendError, startTestKit } from "./scripted_backend.ts";
import type { TestKit } from "./scripted_backend.ts";
import { settlesNow } from "./watched_store.ts";
import { rejects, stepsThenFail, untouched } from "./kit_helpers.ts";

async function failedCreate(t: TestKit, id: string): Promise<MachineRecord> {
  await t.call("create", id);
  (await t.backend.next("create", id)).fail(backendError("clone failed"));
  return await t.store.until(id, State.Failed);
}

const USABLE = { hostRef: "zone-a/800", summary: "VM 800 on zone-a: running", problems: [] };

Deno.test("recover: refused for an unknown id, a machine not FAILED, and adopting a FAILED Configure", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  await stepsThenFail(t, "m1", ["create"], "configure");
  const check = await untouched(t);
  await rejects(
    t.kit.recover({ machineId: "nope", action: "destroy", apply: true }),
    Code.NotFound,
    "unknown",
  );
  for (const action of ["destroy", "adopt"] as const) {
    await rejects(
      t.kit.recover({ machineId: "m0", action, apply: true }),
      Code.FailedPrecondition,
      `${action} of an IDLE machine`,
    );
  }
  t.backend.setInspection("m1", USABLE);
  await rejects(
    t.kit.recover({ machineId: "m1", action: "adopt", apply: true }),
    Code.FailedPrecondition,
    "adopting a FAILED Configure",
  );
  await check("a refused recovery");
});

Deno.test("recover --destroy: a dry run does nothing; applied, the VM found is destroyed and the slot SPECULATIVE", async () => {
  await using t = await startTestKit();
  const failed = await failedCreate(t, "m0");
  t.backend.setInspection("m0", USABLE);
  const check = await untouched(t);
  const dry = await t.kit.recover({ machineId: "m0", action: "destroy", apply: false });
  assert.deepEqual([dry.applied, dry.after], [false, null]);
  assert.match(dry.plan, /stop and destroy VM 800 on zone-a: running; return m0 to SPECULATIVE/);
  await check("a dry run");
  const r0 = (await t.kit.list({ states: [], maxResults: 0 })).revision;
  const applying = t.kit.recover({ machineId: "m0", action: "destroy", apply: true });
  const job = await t.backend.next("delete", "m0");
  assert.equal(
    job.hostRef,
    "zone-a/800",
    "the VM found is destroyed, not the empty host on record",
  );
  job.succeed();
  const done = await applying;
  assert.deepEqual(done.after, {
    ...failed,
    state: State.Speculative,
    hostRef: "",
    lastError: "",
  });
  assert.deepEqual(await t.kit.get("m0"), done.after);
  assert.ok((await t.kit.list({ states: [], maxResults: 0 })).revision > r0, "revision bumped");
  await t.step("create", "m0"); // back in service
});

Deno.test("recover --adopt: only a usable host; then IDLE on it, and a replayed Create answers OK", async () => {
  await using t = await startTestKit();
  const failed = await failedCreate(t, "m0");
  await rejects(
    t.kit.recover({ machineId: "m0", action: "adopt", apply: true }),
    Code.FailedPrecondition,
    "no host",
  );
  t.backend.setInspection("m0", { ...USABLE, problems: ["it is stopped, not running"] });
  await assert.rejects(
    t.kit.recover({ machineId: "m0", action: "adopt", apply: true }),
    /cannot adopt m0 \(VM 800 on zone-a: running\): it is stopped, not running/,
  );
  t.backend.setInspection("m0", USABLE);
  const done = await t.kit.recover({ machineId: "m0", action: "adopt", apply: true });
  assert.deepEqual(done.after, {
    ...failed,
    state: State.Idle,
    hostRef: "zone-a/800",
    lastError: "",
  });
  const replay = await t.call("create", "m0");
  assert.equal(replay.operationId, failed.ops.create, "the Create that failed now stands");
  assert.equal(replay.machine.state, State.Idle);
});

Deno.test("recover: a graceful stop waits for a recovery under way", async () => {
  await using t = await startTestKit();
  await failedCreate(t, "m0");
  t.backend.setInspection("m0", USABLE);
  const applying = t.kit.recover({ machineId: "m0", action: "destroy", apply: true });
  const job = await t.backend.next("delete", "m0");
  const finishing = t.kit.finish(new AbortController().signal);
  assert.equal(await settlesNow(finishing), false, "finish waits for the destroy");
  job.succeed();
  assert.deepEqual(await finishing, []);
  assert.equal((await applying).after?.state, State.Speculative);
});
