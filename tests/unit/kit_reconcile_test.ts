// Boot's inventory and the reconcile pass (src/kit/boot.ts, src/kit/reconcile.ts), in-process
// against the kit (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import { backendError, ORPHAN_TYPE, startTestKit } from "./scripted_backend.ts";
import type { TestKit, VmFact } from "./scripted_backend.ts";
import { nextTurn } from "./watched_store.ts";
import {
  enc,
  ids,
  rejects,
  steps,
  stepsThenFail,
  stepsThenHold,
  untouched,
} from "./kit_helpers.ts";

/** The machine listed on `hostRef`, however the kit names it. */
async function byHost(t: TestKit, hostRef: string): Promise<MachineRecord | undefined> {
  const all = (await t.kit.list({ states: [], maxResults: 0 })).machines;
  return all.find((m) => m.hostRef === hostRef);
}

async function reconcileWith(t: TestKit, vms: readonly VmFact[]) {
  const pass = t.kit.reconcile(new AbortController().signal);
  (await t.backend.nextDescribe()).succeed(vms);
  return await pass;
}

Deno.test("boot: VMs already on the substrate are adopted; unknown managed VMs surface IDLE", async () => {
  await using t = await startTestKit({
    machines: 2,
    vms: [
      { machineId: "m1", hostRef: "zone-b/300" },
      { machineId: "stray-id", hostRef: "zone-a/301" },
      { hostRef: "zone-a/302" },
    ],
  });
  assert.equal((await t.kit.get("m0")).state, State.Speculative);
  const m1 = await t.kit.get("m1");
  assert.equal(m1.state, State.Idle);
  assert.equal(m1.hostRef, "zone-b/300");
  const all = (await t.kit.list({ states: [], maxResults: 0 })).machines;
  assert.equal(all.length, 4);
  for (const host of ["zone-a/301", "zone-a/302"]) {
    const orphan = all.find((m) => m.hostRef === host);
    assert.ok(orphan, `the VM at ${host} is listed`);
    assert.equal(orphan.state, State.Idle);
    // Listed as the backend says: its instance type for orphans, the zone the host is in.
    assert.equal(orphan.instanceType, ORPHAN_TYPE);
    assert.equal(orphan.zone, "zone-a");
  }
});

Deno.test("reconcile: an unknown managed VM surfaces IDLE; an in-flight clone is left alone", async () => {
  await using t = await startTestKit({ machines: 2 });
  const r0 = (await t.kit.list({ states: [], maxResults: 0 })).revision;
  const cloning = await reconcileWith(t, [{
    machineId: "elsewhere",
    hostRef: "zone-a/400",
    cloning: true,
  }]);
  assert.deepEqual(cloning, { changed: 0, orphans: 0, rejoined: 0 });
  assert.equal(t.kit.size, 2);
  assert.equal(await byHost(t, "zone-a/400"), undefined, "a cloning VM is not surfaced");
  const found = await reconcileWith(t, [{ machineId: "elsewhere", hostRef: "zone-a/400" }]);
  assert.deepEqual(found, { changed: 0, orphans: 1, rejoined: 0 });
  const orphan = await byHost(t, "zone-a/400");
  assert.equal(orphan?.state, State.Idle);
  const delta = await t.kit.list({
    states: [],
    maxResults: 0,
    sinceRevision: enc.encode(String(r0)),
  });
  assert.deepEqual(delta.machines, [orphan]);
  assert.deepEqual(await reconcileWith(t, [{ machineId: "elsewhere", hostRef: "zone-a/400" }]), {
    changed: 0,
    orphans: 0,
    rejoined: 0,
  });
});

Deno.test("reconcile: a deleted orphan leaves the inventory", async () => {
  await using t = await startTestKit({
    machines: 1,
    vms: [{ machineId: "o", hostRef: "zone-a/500" }],
  });
  const r0 = (await t.kit.list({ states: [], maxResults: 0 })).revision;
  const orphan = (await byHost(t, "zone-a/500"))!;
  await t.call("delete", orphan.id);
  const job = await t.backend.next("delete");
  assert.equal(job.hostRef, "zone-a/500");
  job.succeed();
  await nextTurn();
  await rejects(t.kit.get(orphan.id), Code.NotFound, "the orphan is gone");
  const after = await t.kit.list({ states: [], maxResults: 0 });
  assert.deepEqual(ids(after.machines), ["m0"]);
  assert.ok(after.revision > r0);
});

Deno.test("reconcile: moved VMs are followed in stable states and FAILED; a SPECULATIVE slot rejoins its VM", async () => {
  await using t = await startTestKit({ machines: 8 });
  await t.step("create", "m0"); // IDLE
  await steps(t, "m1", ["create", "configure"]); // CONFIGURED
  await t.call("create", "m2"); // CREATING
  await stepsThenHold(t, "m3", ["create"], "configure"); // CONFIGURING
  await stepsThenHold(t, "m4", ["create", "configure"], "drain"); // DRAINING
  await stepsThenHold(t, "m5", ["create"], "delete"); // DELETING
  await stepsThenFail(t, "m6", ["create"], "configure"); // FAILED
  // m7 stays SPECULATIVE.
  const before = new Map(
    (await t.kit.list({ states: [], maxResults: 0 })).machines.map((m) => [m.id, m]),
  );
  const vms = t.ids.map((id, i) => ({ machineId: id, hostRef: `moved/${900 + i}` }));
  assert.deepEqual(await reconcileWith(t, vms), { changed: 3, orphans: 0, rejoined: 1 });
  for (const id of t.ids) {
    const was = before.get(id)!;
    const now = await t.kit.get(id);
    const moved = `moved/${900 + Number(id.slice(1))}`;
    if (id === "m7") {
      // Only an older state restored has a slot without its VM: the slot takes it back.
      assert.deepEqual(now, { ...was, state: State.Idle, hostRef: moved }, id);
      continue;
    }
    const followed = id === "m0" || id === "m1" || id === "m6";
    assert.equal(now.hostRef, followed ? moved : was.hostRef, id);
    assert.deepEqual({ ...now, hostRef: was.hostRef }, was, `${id}: only the host may change`);
  }
  // A VM that is still being cloned is not followed either.
  const m0 = await t.kit.get("m0");
  assert.deepEqual(
    await reconcileWith(t, [{ machineId: "m0", hostRef: "again/1", cloning: true }]),
    { changed: 0, orphans: 0, rejoined: 0 },
  );
  assert.equal((await t.kit.get("m0")).hostRef, m0.hostRef);
});

Deno.test("reconcile: a FAILED Create's VM is recorded on it, clone in flight included, once", async () => {
  await using t = await startTestKit({ machines: 2 });
  await t.call("create", "m0");
  (await t.backend.next("create", "m0")).fail(backendError("clone task failed: agent timeout"));
  const failed = await t.store.until("m0", State.Failed);
  assert.equal(failed.hostRef, "", "a failed Create has no host");
  const r0 = (await t.kit.list({ states: [], maxResults: 0 })).revision;
  const seen = [{ machineId: "m0", hostRef: "zone-a/700", cloning: true }];
  assert.deepEqual(await reconcileWith(t, seen), { changed: 1, orphans: 0, rejoined: 0 });
  const m0 = await t.kit.get("m0");
  assert.deepEqual(m0, { ...failed, hostRef: "zone-a/700" }, "only the host is added");
  const delta = await t.kit.list({
    states: [],
    maxResults: 0,
    sinceRevision: enc.encode(String(r0)),
  });
  assert.deepEqual(ids(delta.machines), ["m0"], "the change bumps the revision like any other");
  assert.deepEqual(t.kit.countFailed(), { withHost: 1, withoutHost: 0 });
  // Seen again (done cloning now): nothing changes, nothing is written.
  const check = await untouched(t);
  const again = [{ machineId: "m0", hostRef: "zone-a/700" }];
  assert.deepEqual(await reconcileWith(t, again), { changed: 0, orphans: 0, rejoined: 0 });
  await check("a FAILED machine seen again");
  assert.equal(t.backend.calls.filter((c) => c.kind === "delete").length, 0, "nothing destroyed");
});

Deno.test("reconcile: a SPECULATIVE slot that changed while the backend described is left alone", async () => {
  await using t = await startTestKit({ machines: 2 });
  await t.step("create", "m0");
  const pass = t.kit.reconcile(new AbortController().signal);
  const describing = await t.backend.nextDescribe();
  // A Delete completes while the listing (which still shows the VM) is on its way.
  await t.step("delete", "m0");
  describing.succeed([{ machineId: "m0", hostRef: "zone-a/100" }]);
  assert.deepEqual(await pass, { changed: 0, orphans: 0, rejoined: 0 });
  assert.equal((await t.kit.get("m0")).state, State.Speculative);
});

Deno.test("reconcile: nothing changed means no write and no revision bump (B908, B1105)", async () => {
  await using t = await startTestKit({ vms: [{ machineId: "o", hostRef: "zone-a/600" }] });
  await t.step("create", "m0");
  await steps(t, "m1", ["create", "configure"]);
  const all = (await t.kit.list({ states: [], maxResults: 0 })).machines;
  const vms = all.filter((m) => m.hostRef !== "").map((m) => ({
    machineId: m.id,
    hostRef: m.hostRef,
  }));
  assert.equal(vms.length, 3);
  const check = await untouched(t);
  const { revision } = await t.kit.list({ states: [], maxResults: 0 });
  assert.deepEqual(await reconcileWith(t, vms), { changed: 0, orphans: 0, rejoined: 0 });
  assert.deepEqual(
    await reconcileWith(t, []),
    { changed: 0, orphans: 0, rejoined: 0 },
    "a VM gone is not a change",
  );
  await check("an idle reconcile");
  assert.equal(t.kit.size, all.length);
  const delta = await t.kit.list({
    states: [],
    maxResults: 0,
    sinceRevision: enc.encode(String(revision)),
  });
  assert.deepEqual(delta.machines, []);
});

Deno.test("reconcile: a failing describe changes nothing", async () => {
  await using t = await startTestKit();
  const check = await untouched(t);
  const pass = t.kit.reconcile(new AbortController().signal);
  (await t.backend.nextDescribe()).fail(new Error("proxy said 596"));
  await assert.rejects(pass, /596/);
  await check("a failed reconcile");
});
