// The transition matrix, what each transition does, failures, timeouts and stale
// completions (src/kit/dispatch.ts, src/kit/model.ts EDGES, src/async/deadline.ts),
// in-process against the kit (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { State, STATE_NAMES } from "../../src/kit/model.ts";
import type { Pairs } from "../../src/kit/model.ts";
import { backendError, NO_TOKEN, startTestKit, TARGET, tok } from "./scripted_backend.ts";
import type { Kind, TestKit } from "./scripted_backend.ts";
import {
  enc,
  failNext,
  KINDS,
  rejects,
  state,
  steps,
  stepsThenFail,
  stepsThenHold,
  untouched,
} from "./kit_helpers.ts";
import type { Ops } from "./kit_helpers.ts";

const VIA: Record<Kind, State> = {
  create: State.Creating,
  configure: State.Configuring,
  drain: State.Draining,
  delete: State.Deleting,
};

type Expect = "start" | "replay" | "reject";

interface Situation {
  name: string;
  state: State;
  setup(t: TestKit, id: string): Promise<Ops>;
  expect: Record<Kind, Expect>;
}

const SITUATIONS: Situation[] = [
  {
    name: "SPECULATIVE, never created",
    state: State.Speculative,
    setup: () => Promise.resolve({}),
    expect: { create: "start", configure: "reject", drain: "reject", delete: "reject" },
  },
  {
    name: "SPECULATIVE after a delete",
    state: State.Speculative,
    setup: (t, id) => steps(t, id, ["create", "delete"]),
    expect: { create: "start", configure: "reject", drain: "reject", delete: "replay" },
  },
  {
    name: "CREATING",
    state: State.Creating,
    setup: (t, id) => stepsThenHold(t, id, [], "create"),
    expect: { create: "replay", configure: "reject", drain: "reject", delete: "reject" },
  },
  {
    name: "IDLE after a create",
    state: State.Idle,
    setup: (t, id) => steps(t, id, ["create"]),
    expect: { create: "replay", configure: "start", drain: "reject", delete: "start" },
  },
  {
    name: "IDLE after a drain",
    state: State.Idle,
    setup: (t, id) => steps(t, id, ["create", "configure", "drain"]),
    expect: { create: "replay", configure: "start", drain: "replay", delete: "start" },
  },
  {
    name: "CONFIGURING",
    state: State.Configuring,
    setup: (t, id) => stepsThenHold(t, id, ["create"], "configure"),
    expect: { create: "reject", configure: "replay", drain: "reject", delete: "reject" },
  },
  {
    name: "CONFIGURED",
    state: State.Configured,
    setup: (t, id) => steps(t, id, ["create", "configure"]),
    expect: { create: "reject", configure: "replay", drain: "start", delete: "reject" },
  },
  {
    name: "DRAINING",
    state: State.Draining,
    setup: (t, id) => stepsThenHold(t, id, ["create", "configure"], "drain"),
    expect: { create: "reject", configure: "reject", drain: "replay", delete: "reject" },
  },
  {
    name: "DELETING",
    state: State.Deleting,
    setup: (t, id) => stepsThenHold(t, id, ["create"], "delete"),
    expect: { create: "reject", configure: "reject", drain: "reject", delete: "replay" },
  },
  {
    name: "FAILED by a create",
    state: State.Failed,
    setup: (t, id) => stepsThenFail(t, id, [], "create"),
    expect: { create: "reject", configure: "reject", drain: "reject", delete: "reject" },
  },
  {
    name: "FAILED by a drain",
    state: State.Failed,
    setup: (t, id) => stepsThenFail(t, id, ["create", "configure"], "drain"),
    expect: { create: "reject", configure: "reject", drain: "reject", delete: "reject" },
  },
];

for (const s of SITUATIONS) {
  Deno.test(`matrix: every call on a machine ${s.name} (B105, B201–B205, B1203)`, async () => {
    for (const kind of KINDS) {
      await using t = await startTestKit();
      const ops = await s.setup(t, "m0");
      const before = await t.kit.get("m0");
      assert.equal(before.state, s.state, `setup reached ${STATE_NAMES[s.state]}`);
      const what = `${kind} on ${s.name}`;
      const want = s.expect[kind];
      if (want === "reject") {
        const check = await untouched(t);
        await rejects(t.call(kind, "m0"), Code.Internal, what);
        await check(what);
        assert.deepEqual(await t.kit.get("m0"), before, `${what}: the machine is unchanged`);
      } else if (want === "replay") {
        const check = await untouched(t);
        const ack = await t.call(kind, "m0");
        assert.equal(ack.operationId, ops[kind], `${what}: the recorded op`);
        assert.deepEqual(ack.machine, before, `${what}: the ack shows the machine as it stands`);
        await check(what);
      } else {
        const ack = await t.call(kind, "m0");
        assert.ok(!Object.values(ops).includes(ack.operationId), `${what}: a new op id`);
        assert.equal(ack.machine.state, VIA[kind], `${what}: acked in its transitional state`);
        assert.equal(await state(t, "m0"), VIA[kind]);
        const job = await t.backend.next(kind);
        assert.equal(job.machineId, "m0");
        job.succeed();
        assert.equal((await t.store.until("m0", TARGET[kind])).lastError, "");
      }
    }
  });
}

Deno.test("lifecycle: acks show the transitional state; completions land with the right fields (B106, B107, B807)", async () => {
  await using t = await startTestKit();
  const created = await t.call("create", "m0");
  assert.equal(created.machine.state, State.Creating);
  assert.equal(created.machine.hostRef, "", "no host while CREATING");
  const createJob = await t.backend.next("create");
  assert.equal(createJob.machineId, "m0");
  // Only BigFleet facts: the backend resolves sizing and source from the type itself.
  assert.deepEqual(createJob.slot, {
    machineId: "m0",
    operationId: created.operationId,
    instanceType: "t.large",
    zone: "zone-a",
  });
  createJob.succeed("zone-a/555");
  const idle = await t.store.until("m0", State.Idle);
  assert.equal(idle.hostRef, "zone-a/555");
  assert.equal(idle.cluster, "");
  assert.equal(idle.lastError, "");

  const md: Pairs = [["k", "v"], ["empty", ""]];
  const blob = enc.encode("secret bootstrap");
  const configuring = await t.kit.configure({
    machineId: "m0",
    token: NO_TOKEN,
    clusterId: "cl",
    bootstrap: blob,
    shardMetadata: md,
  });
  // The binding is visible from CONFIGURING on (B106, B504).
  assert.equal(configuring.machine.state, State.Configuring);
  assert.equal(configuring.machine.cluster, "cl");
  assert.deepEqual(configuring.machine.shardMetadata, md);
  const configureJob = await t.backend.next("configure");
  assert.equal(configureJob.hostRef, "zone-a/555");
  assert.equal(configureJob.clusterId, "cl");
  assert.deepEqual(configureJob.bootstrap, blob);
  assert.equal(
    await state(t, "m0"),
    State.Configuring,
    "not CONFIGURED before the backend says so",
  );
  configureJob.succeed();
  const configured = await t.store.until("m0", State.Configured);
  assert.equal(configured.cluster, "cl");
  assert.deepEqual(configured.shardMetadata, md);
  assert.equal(configured.hostRef, "zone-a/555");

  const draining = await t.kit.drain({ machineId: "m0", token: NO_TOKEN, graceSeconds: 7n });
  // The shard needs the cluster while DRAINING.
  assert.equal(draining.machine.state, State.Draining);
  assert.equal(draining.machine.cluster, "cl");
  assert.deepEqual(draining.machine.shardMetadata, md);
  const drainJob = await t.backend.next("drain");
  assert.equal(drainJob.graceSeconds, 7n);
  assert.equal(drainJob.hostRef, "zone-a/555");
  drainJob.succeed();
  const drained = await t.store.until("m0", State.Idle);
  assert.equal(drained.cluster, "");
  assert.deepEqual(drained.shardMetadata, []);
  assert.equal(drained.hostRef, "zone-a/555");

  const deleting = await t.call("delete", "m0");
  assert.equal(deleting.machine.state, State.Deleting);
  assert.equal(deleting.machine.hostRef, "zone-a/555");
  const deleteJob = await t.backend.next("delete");
  assert.equal(deleteJob.hostRef, "zone-a/555");
  deleteJob.succeed();
  const gone = await t.store.until("m0", State.Speculative);
  assert.equal(gone.hostRef, "");
  assert.equal(gone.cluster, "");
  assert.deepEqual(gone.shardMetadata, []);
});

const FROM: Record<Kind, Kind[]> = {
  create: [],
  configure: ["create"],
  drain: ["create", "configure"],
  delete: ["create"],
};

Deno.test("failures: a backend error moves the machine to FAILED with last_error (B701, B702, B706)", async () => {
  for (const kind of KINDS) {
    await using t = await startTestKit();
    await steps(t, "m0", FROM[kind]);
    await t.call(kind, "m0");
    await failNext(t, kind, "m0", `the ${kind} hook exited 3`);
    const m = await t.kit.get("m0");
    assert.equal(m.state, State.Failed);
    assert.match(m.lastError, new RegExp(`the ${kind} hook exited 3`), kind);
  }
});

Deno.test("failures: last_error is `<kind> failed: …` whatever the backend's message starts with; a timeout's is the kit's own", async () => {
  for (const kind of KINDS) {
    await using t = await startTestKit({ timeouts: { [kind]: 60_000 } });
    await steps(t, "m0", FROM[kind]);
    await t.call(kind, "m0");
    // A backend's text that happens to begin with the kind is still the backend's.
    await failNext(t, kind, "m0", `${kind} hook exited 3`);
    assert.equal((await t.kit.get("m0")).lastError, `${kind} failed: ${kind} hook exited 3`);
  }
  for (const kind of KINDS) {
    await using t = await startTestKit({ timeouts: { [kind]: 5 } });
    await steps(t, "m0", FROM[kind]);
    await t.call(kind, "m0");
    await t.backend.next(kind);
    assert.equal(
      (await t.store.until("m0", State.Failed)).lastError,
      `${kind} timed out after 5ms`,
    );
  }
});

Deno.test("timeouts: a transition that outlives its timeout is FAILED and its work aborted (B703)", async () => {
  for (const kind of KINDS) {
    // Only this kind's timeout is short: the setup steps run under the defaults.
    const timeouts: Partial<Record<Kind, number>> = { [kind]: 5 };
    await using t = await startTestKit({ timeouts });
    await steps(t, "m0", FROM[kind]);
    await t.call(kind, "m0");
    const job = await t.backend.next(kind);
    assert.equal(job.signal.aborted, false);
    const failed = await t.store.until("m0", State.Failed);
    assert.ok(job.signal.aborted, `${kind}: the backend was told to stop`);
    assert.match(failed.lastError, /timed out/, kind);
    assert.match(failed.lastError, new RegExp(kind), kind);
  }
});

Deno.test("stale completions: a result that arrives after the timeout is discarded (B704)", async () => {
  for (const late of ["succeed", "fail"] as const) {
    await using t = await startTestKit({ timeouts: { configure: 5 } });
    await t.step("create", "m0");
    await t.call("configure", "m0");
    const job = await t.backend.next("configure");
    const failed = await t.store.until("m0", State.Failed);
    const check = await untouched(t);
    if (late === "succeed") job.succeed();
    else job.fail(backendError("late failure"));
    await check(`a late ${late}`);
    const m = await t.kit.get("m0");
    assert.equal(m.state, State.Failed);
    assert.equal(m.lastError, failed.lastError, "last_error is the timeout's");
  }
});

Deno.test("FAILED is terminal: every call is refused and last_error never changes (B705, B707)", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  await t.call("configure", "m0");
  await failNext(t, "configure", "m0", "fault-error");
  const failed = await t.kit.get("m0");
  assert.notEqual(failed.lastError, "");
  const check = await untouched(t);
  for (const kind of KINDS) await rejects(t.call(kind, "m0"), Code.Internal, kind);
  await check("calls on FAILED");
  let seq = 0;
  for (const kind of KINDS) {
    await rejects(t.call(kind, "m0", tok("s", 1, ++seq)), Code.Internal, `${kind} fenced`);
  }
  for (let i = 0; i < 3; i++) assert.deepEqual(await t.kit.get("m0"), failed);
  const listed = await t.kit.list({ states: [State.Failed], maxResults: 0 });
  assert.deepEqual(listed.machines, [failed]);
  assert.equal(t.backend.calls.length, 2, "no new backend work");
});
