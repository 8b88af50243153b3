// The CapacityProvider contract, in-process: startKit with a memory store and
// a scripted backend (tests/unit/scripted_backend.ts). Written from the
// contract (fencing, idempotency, the transition matrix, timeouts, FAILED,
// shard_metadata, List, reconcile, shutdown), with the behaviour ids of the
// certification program where one applies. Nothing sleeps: background work
// finishes when a test settles its backend call, and tests wait on the state
// store's writes.

import assert from "node:assert/strict";
import { Code, KitError } from "../../src/kit/errors.ts";
import type { Ack } from "../../src/kit/api.ts";
import { State, STATE_NAMES } from "../../src/kit/model.ts";
import type { MachineRecord, Pairs } from "../../src/kit/model.ts";
import { Rng } from "../harness/rand.ts";
import {
  backendError,
  CONFIGURE_DEFAULTS,
  NO_TOKEN,
  ORPHAN_TYPE,
  startTestKit,
  TARGET,
  tok,
} from "./scripted_backend.ts";
import type { Kind, TestKit, TestKitOptions, VmFact } from "./scripted_backend.ts";
import { nextTurn, settlesNow } from "./watched_store.ts";

const KINDS: Kind[] = ["create", "configure", "drain", "delete"];
const VIA: Record<Kind, State> = {
  create: State.Creating,
  configure: State.Configuring,
  drain: State.Draining,
  delete: State.Deleting,
};
const MAX = 2n ** 63n - 1n;
const MIN = -(2n ** 63n);
const enc = new TextEncoder();

type Outcome = { ok: true; ack: Ack } | { ok: false; code: number; message: string };

async function outcome(p: Promise<Ack>): Promise<Outcome> {
  try {
    return { ok: true, ack: await p };
  } catch (e) {
    if (!(e instanceof KitError)) throw e;
    return { ok: false, code: e.code, message: e.message };
  }
}

async function rejects(p: Promise<unknown>, code: number, what: string): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof KitError, `${what}: expected a KitError, got ${e}`);
    assert.equal(e.code, code, `${what}: ${e.message}`);
    return;
  }
  assert.fail(`${what}: expected code ${code}, got OK`);
}

function describeOutcome(o: Outcome): string {
  return o.ok ? `OK ${o.ack.operationId}` : `code ${o.code} (${o.message})`;
}

/** Settles the oldest open call of `kind` with a failure and waits for FAILED. */
async function failNext(t: TestKit, kind: Kind, id: string, message: string): Promise<void> {
  (await t.backend.next(kind, id)).fail(backendError(message));
  await t.store.until(id, State.Failed);
}

async function state(t: TestKit, id: string): Promise<State> {
  return (await t.kit.get(id)).state;
}

/** A snapshot of everything a rejected call must leave alone. */
async function untouched(t: TestKit) {
  const before = {
    writes: t.store.writes,
    calls: t.backend.calls.length,
    revision: (await t.kit.list({ states: [], maxResults: 0 })).revision,
  };
  return async (what: string) => {
    await nextTurn(); // background work would have reached the backend by now
    assert.equal(t.store.writes, before.writes, `${what}: nothing may be written`);
    assert.equal(t.backend.calls.length, before.calls, `${what}: no backend work may start`);
    const { revision } = await t.kit.list({ states: [], maxResults: 0 });
    assert.equal(revision, before.revision, `${what}: the revision may not move`);
  };
}

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

function sorted(p: Pairs): [string, string][] {
  return [...p].map(([k, v]) => [k, v] as [string, string]).sort((a, b) =>
    a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0
  );
}

// ---- fencing -------------------------------------------------------------------

Deno.test("fence: a token must be strictly newer than its mark, epoch first (B303)", async () => {
  await using t = await startTestKit();
  const steps: [number, number, boolean][] = [
    [2, 5, true],
    [2, 5, false],
    [2, 4, false],
    [1, 9, false],
    [1, 99999, false],
    [2, 6, true],
    [2, 6, false],
    [2, 5, false],
    [3, 0, true],
    [3, 0, false],
    [2, 999999, false],
    [3, 1, true],
    [4, 0, true],
    [4, 0, false],
    [10, 7, true],
    [10, 7, false],
    [9, 999, false],
  ];
  for (const [e, s, pass] of steps) {
    const o = await outcome(t.call("create", "m0", tok("s", e, s)));
    if (pass) assert.ok(o.ok, `(${e},${s}) must pass: ${describeOutcome(o)}`);
    else assert.equal(o.ok ? 0 : o.code, Code.FailedPrecondition, `(${e},${s}) must be fenced`);
  }
  assert.deepEqual(t.store.fence("s", "m0"), { epoch: 10n, seq: 7n });
});

Deno.test("fence: int64 values compare exactly and as signed (B211, B212)", async () => {
  await using t = await startTestKit();
  const P53 = 2n ** 53n;
  const runs: [string, [bigint, bigint, boolean][]][] = [
    ["max", [[MAX, MAX, true], [MAX, MAX, false], [MAX - 1n, MAX, false], [MAX, MAX - 1n, false]]],
    ["min", [
      [MIN, MIN, true],
      [MIN, MIN, false],
      [MIN, MIN + 1n, true],
      [-1n, MAX, true],
      [0n, MIN, true],
      [0n, MIN, false],
      [-1n, 0n, false],
    ]],
    // Above 2^53 a double cannot tell these apart.
    ["p53", [[1n, P53, true], [1n, P53 + 1n, true], [1n, P53 + 1n, false], [1n, P53, false]]],
    ["neg1", [[-1n, 1n, true], [-1n, 1n, false]]],
    ["neg2", [[1n, -1n, true], [1n, -2n, false], [1n, 0n, true]]],
    ["neg3", [[-7n, -3n, true], [-7n, -4n, false], [-6n, MIN, true]]],
  ];
  for (const [shard, steps] of runs) {
    for (const [e, s, pass] of steps) {
      const o = await outcome(t.call("create", "m0", tok(shard, e, s)));
      if (pass) assert.ok(o.ok, `${shard} (${e},${s}) must pass: ${describeOutcome(o)}`);
      else {
        assert.equal(o.ok ? 0 : o.code, Code.FailedPrecondition, `${shard} (${e},${s}) fenced`);
      }
    }
  }
  assert.deepEqual(t.store.fence("max", "m0"), { epoch: MAX, seq: MAX });
  assert.deepEqual(t.store.fence("p53", "m0"), { epoch: 1n, seq: P53 + 1n });
});

Deno.test("fence: only an empty shard with (0,0) is unfenced; (0,0) from a shard is real (B308, B312)", async () => {
  await using t = await startTestKit();
  for (let i = 0; i < 3; i++) assert.ok((await outcome(t.call("create", "m0", NO_TOKEN))).ok);
  assert.equal(t.store.fence("", "m0"), undefined, "the unfenced call leaves no mark");

  assert.ok((await outcome(t.call("create", "m1", tok("s", 0, 0)))).ok, "first contact (0,0)");
  await rejects(t.call("create", "m1", tok("s", 0, 0)), Code.FailedPrecondition, "(0,0) replay");

  // The empty shard with any other value is a real token, keyed under shard "".
  assert.ok((await outcome(t.call("create", "m2", tok("", 0, 1)))).ok);
  await rejects(t.call("create", "m2", tok("", 0, 1)), Code.FailedPrecondition, '("",0,1) replay');
  assert.deepEqual(t.store.fence("", "m2"), { epoch: 0n, seq: 1n });
  assert.ok((await outcome(t.call("create", "m2", NO_TOKEN))).ok, "the unfenced call still passes");
});

Deno.test("fence: marks are per (shard, machine) (B302, FencingPerMachineIsolation)", async () => {
  await using t = await startTestKit();
  const [a, b, c] = t.ids;
  const steps: [string, string, number, number, boolean][] = [
    ["A", a, 9, 9, true],
    ["B", b, 7, 3, true],
    ["C", c, 1, 1, true],
    ["A", a, 1, 1, false],
    ["B", b, 7, 3, false],
    ["C", c, 1, 1, false],
    ["B", b, 7, 4, true],
    ["D", a, 5, 30, true],
    ["D", b, 5, 7, true], // lower sequence, other machine
    ["D", b, 5, 7, false],
    ["D", a, 5, 30, false],
    ["D", b, 4, 999, false], // lower epoch
    ["E", a, 1, 1, true], // another shard on a machine A has marked high
  ];
  for (const [shard, id, e, s, pass] of steps) {
    const o = await outcome(t.call("create", id, tok(shard, e, s)));
    const what = `${shard} (${e},${s}) on ${id}`;
    if (pass) assert.ok(o.ok, `${what} must pass: ${describeOutcome(o)}`);
    else assert.equal(o.ok ? 0 : o.code, Code.FailedPrecondition, `${what} must be fenced`);
  }
});

Deno.test("fence: checked before not-found, and unknown machines keep marks (B301)", async () => {
  await using t = await startTestKit();
  const ghost = "conformance-b301-ghost-machine";
  await rejects(t.call("create", ghost, tok("s", 5, 5)), Code.NotFound, "(5,5)");
  assert.deepEqual(t.store.fence("s", ghost), { epoch: 5n, seq: 5n }, "the mark is persisted");
  for (const kind of KINDS) {
    await rejects(t.call(kind, ghost, tok("s", 1, 1)), Code.FailedPrecondition, `${kind} (1,1)`);
  }
  await rejects(t.call("configure", ghost, tok("s", 9, 9)), Code.NotFound, "(9,9)");
  await rejects(t.kit.get(ghost), Code.NotFound, "nothing was created");
});

Deno.test("fence: checked before the idempotent replay (B306, B307, FencingUnknownShardAccepted)", async () => {
  await using t = await startTestKit();
  let seq = 0;
  for (const kind of ["create", "configure", "drain"] as Kind[]) {
    const first = await t.call(kind, "m0", tok("s", 5, ++seq));
    (await t.backend.next(kind)).succeed();
    await t.store.until("m0", TARGET[kind]);
    await rejects(t.call(kind, "m0", tok("s", 5, seq)), Code.FailedPrecondition, `${kind} replay`);
    await rejects(t.call(kind, "m0", tok("s", 1, 1)), Code.FailedPrecondition, `${kind} zombie`);
    const again = await t.call(kind, "m0", tok("s", 5, ++seq));
    assert.equal(again.operationId, first.operationId, `${kind}: a newer token gets the cached op`);
  }
});

Deno.test("fence: a passing token moves the mark even when the call is then rejected (B311)", async () => {
  await using t = await startTestKit();
  await rejects(t.call("drain", "m0", tok("s", 5, 5)), Code.Internal, "drain on SPECULATIVE");
  assert.deepEqual(t.store.fence("s", "m0"), { epoch: 5n, seq: 5n });
  await rejects(t.call("create", "m0", tok("s", 5, 4)), Code.FailedPrecondition, "(5,4)");
  await rejects(t.call("create", "m0", tok("s", 5, 5)), Code.FailedPrecondition, "(5,5)");
  assert.ok((await outcome(t.call("create", "m0", tok("s", 5, 6)))).ok, "(5,6)");
});

Deno.test("fence: a refused token has no effect at all", async () => {
  await using t = await startTestKit();
  const op = (await t.call("create", "m0", tok("s", 2, 5))).operationId;
  const check = await untouched(t);
  await rejects(t.call("create", "m0", tok("s", 1, 99)), Code.FailedPrecondition, "(1,99)");
  await check("a fenced call");
  // Had (1,99) become the mark, (2,1) would pass.
  await rejects(t.call("create", "m0", tok("s", 2, 1)), Code.FailedPrecondition, "(2,1)");
  assert.deepEqual(t.store.fence("s", "m0"), { epoch: 2n, seq: 5n });
  assert.equal((await t.call("create", "m0", tok("s", 2, 6))).operationId, op);
});

Deno.test("fence: an empty machine id is INVALID_ARGUMENT before the fence (B208)", async () => {
  await using t = await startTestKit();
  // Even a zombie token on an empty id gets INVALID_ARGUMENT, and leaves no mark.
  assert.ok((await outcome(t.call("create", "m0", tok("s", 9, 9)))).ok);
  for (const kind of KINDS) {
    await rejects(t.call(kind, "", tok("s", 1, 1)), Code.InvalidArgument, `${kind} ""`);
    await rejects(t.call(kind, "", NO_TOKEN), Code.InvalidArgument, `${kind} "" unfenced`);
  }
  await rejects(t.kit.get(""), Code.InvalidArgument, 'get ""');
  assert.equal(t.store.fence("s", ""), undefined);
});

Deno.test("fence: random tokens on every kind agree with a lexicographic oracle (B1201, B1204)", async () => {
  await using t = await startTestKit({ machines: 4 });
  const rng = new Rng(11);
  const shards = ["s1", "s2", "s3"];
  const marks = new Map<string, { epoch: bigint; seq: bigint }>();
  let fenced = 0;
  for (let i = 0; i < 600; i++) {
    const id = rng.pick(t.ids);
    const kind = rng.pick(KINDS);
    const unfenced = rng.int(0, 9) === 0;
    const shard = rng.pick(shards);
    const token = unfenced ? NO_TOKEN : tok(shard, rng.int(-1, 4), rng.int(-3, 6));
    const key = `${shard}|${id}`;
    const mark = marks.get(key);
    const newer = !mark || token.epoch > mark.epoch ||
      (token.epoch === mark.epoch && token.seq > mark.seq);
    const o = await outcome(t.call(kind, id, token));
    const what = `#${i} ${kind} ${id} ${shard} (${token.epoch},${token.seq}): ${
      describeOutcome(o)
    }`;
    if (unfenced || newer) {
      // Past the fence: accepted, replayed, or out of position; never fenced.
      assert.ok(o.ok || o.code === Code.Internal, what);
      if (!unfenced) marks.set(key, { epoch: token.epoch, seq: token.seq });
    } else {
      assert.equal(o.ok ? 0 : o.code, Code.FailedPrecondition, what);
      fenced++;
    }
  }
  assert.ok(fenced > 50, `the sequence exercised the fence (${fenced} refusals)`);
  for (const [key, mark] of marks) {
    const [shard, id] = key.split("|");
    assert.deepEqual(t.store.fence(shard, id), mark, `persisted mark of ${key}`);
  }
});

// ---- idempotency ---------------------------------------------------------------

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

// ---- the transition matrix -----------------------------------------------------

type Ops = Partial<Record<Kind, string>>;
type Expect = "start" | "replay" | "reject";

interface Situation {
  name: string;
  state: State;
  setup(t: TestKit, id: string): Promise<Ops>;
  expect: Record<Kind, Expect>;
}

async function steps(t: TestKit, id: string, kinds: Kind[]): Promise<Ops> {
  const ops: Ops = {};
  for (const k of kinds) ops[k] = (await t.step(k, id)).operationId;
  return ops;
}

async function stepsThenHold(t: TestKit, id: string, done: Kind[], held: Kind): Promise<Ops> {
  const ops = await steps(t, id, done);
  ops[held] = (await t.call(held, id)).operationId;
  await t.backend.next(held, id); // taken and left running
  return ops;
}

async function stepsThenFail(t: TestKit, id: string, done: Kind[], failing: Kind): Promise<Ops> {
  const ops = await steps(t, id, done);
  ops[failing] = (await t.call(failing, id)).operationId;
  await failNext(t, failing, id, `${failing} broke`);
  return ops;
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

// ---- what each transition does ---------------------------------------------------

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

// ---- shard_metadata and Configure arguments -----------------------------------------

Deno.test("metadata: stored and echoed byte for byte everywhere (B501, B504, B1202)", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  const md: Pairs = [
    ["bigfleet.lucy.sh/assigned-group", "topology.bigfleet/rack\u0000gang-7"],
    ["x-key-with-nul\u0000suffix", "v"],
    ["x-c0", "\u0000\u0001\u0002\u001f\u007f"],
    ["x-nel", "\u0085"],
    ["节点/unicode", "γειά 你好 🚀\t\n"],
    ["x-empty/value", ""],
    ["trailing ", "spaces  "],
    ["__proto__", "not a prototype"],
    ["constructor", "plain"],
    ["", "empty key"],
  ];
  const ack = await t.kit.configure({
    machineId: "m0",
    token: NO_TOKEN,
    clusterId: "conf-b501",
    bootstrap: new Uint8Array(),
    shardMetadata: md,
  });
  assert.deepEqual(sorted(ack.machine.shardMetadata), sorted(md), "ack");
  assert.deepEqual(sorted(t.store.machine("m0")!.shardMetadata), sorted(md), "persisted");
  (await t.backend.next("configure")).succeed();
  await t.store.until("m0", State.Configured);
  assert.deepEqual(sorted((await t.kit.get("m0")).shardMetadata), sorted(md), "get");
  const listed = (await t.kit.list({ states: [State.Configured], maxResults: 0 })).machines;
  assert.deepEqual(sorted(listed[0].shardMetadata), sorted(md), "list");
});

Deno.test("metadata: the kit keeps its own copy of what the caller sent (B505)", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  const md: [string, string][] = [["a", "1"], ["b", "2"]];
  await t.kit.configure({
    ...CONFIGURE_DEFAULTS,
    machineId: "m0",
    token: NO_TOKEN,
    shardMetadata: md,
  });
  md[0][1] = "changed";
  md.pop();
  md.push(["c", "3"]);
  assert.deepEqual(sorted((await t.kit.get("m0")).shardMetadata), [["a", "1"], ["b", "2"]]);
  assert.deepEqual(sorted(t.store.machine("m0")!.shardMetadata), [["a", "1"], ["b", "2"]]);
});

Deno.test("metadata: over the limit is INVALID_ARGUMENT and changes nothing; the limit counts UTF-8 bytes", async () => {
  await using t = await startTestKit({ maxMetadataBytes: 64 });
  await t.step("create", "m0");
  await t.step("create", "m1");
  // 2 + 30 + 2 + 30 = 64 bytes ("κ" is two bytes, one UTF-16 unit).
  const atLimit: Pairs = [["ab", "x".repeat(30)], ["κ", "y".repeat(30)]];
  const over: Pairs = [["ab", "x".repeat(30)], ["κ", "y".repeat(31)]]; // 65 bytes, 64 units
  const check = await untouched(t);
  await rejects(
    t.kit.configure({
      ...CONFIGURE_DEFAULTS,
      machineId: "m0",
      token: NO_TOKEN,
      shardMetadata: over,
    }),
    Code.InvalidArgument,
    "65 bytes",
  );
  await check("an oversized map");
  const m0 = await t.kit.get("m0");
  assert.equal(m0.state, State.Idle);
  assert.equal(m0.cluster, "");
  assert.deepEqual(m0.shardMetadata, []);
  const ack = await t.kit.configure({
    ...CONFIGURE_DEFAULTS,
    machineId: "m1",
    token: NO_TOKEN,
    shardMetadata: atLimit,
  });
  assert.equal(ack.machine.state, State.Configuring);
});

// Maps up to --max-metadata (8 MiB) are accepted (docs/design.md#order-of-checks-and-idempotency);
// the catalog would let a provider refuse these two.
Deno.test("metadata: large maps (B209, B503) are accepted and echoed exactly", async () => {
  const shapes: [string, number, number][] = [["b209", 512, 1024], ["b503", 256, 8192]];
  for (const [name, keys, valueBytes] of shapes) {
    await using t = await startTestKit();
    await t.step("create", "m0");
    const md: Pairs = Array.from(
      { length: keys },
      (_, i) => [`${name}-key-${String(i).padStart(4, "0")}`, "v".repeat(valueBytes)],
    );
    const o = await outcome(
      t.kit.configure({
        ...CONFIGURE_DEFAULTS,
        machineId: "m0",
        token: NO_TOKEN,
        shardMetadata: md,
      }),
    );
    assert.ok(o.ok, `${name}: ${describeOutcome(o)}`);
    (await t.backend.next("configure")).succeed();
    await t.store.until("m0", State.Configured);
    assert.deepEqual(sorted((await t.kit.get("m0")).shardMetadata), sorted(md), name);
  }
});

Deno.test("configure: an empty cluster_id is refused and changes nothing", async () => {
  await using t = await startTestKit();
  await t.step("create", "m0");
  const check = await untouched(t);
  await rejects(
    t.kit.configure({ ...CONFIGURE_DEFAULTS, machineId: "m0", token: NO_TOKEN, clusterId: "" }),
    Code.InvalidArgument,
    "empty cluster",
  );
  await check("empty cluster");
});

// A Drain's grace goes to the backend as it came, negative included
// (docs/design.md#order-of-checks-and-idempotency); the catalog would allow INVALID_ARGUMENT too.
Deno.test("drain: a negative grace is accepted and handed to the backend (B210)", async () => {
  await using t = await startTestKit();
  await steps(t, "m0", ["create", "configure"]);
  const o = await outcome(t.kit.drain({ machineId: "m0", token: NO_TOKEN, graceSeconds: -5n }));
  assert.ok(o.ok, describeOutcome(o));
  const call = await t.backend.next("drain");
  assert.equal(call.graceSeconds, -5n, "the grace as it came");
  call.succeed();
  assert.equal((await t.store.until("m0", State.Idle)).cluster, "");
});

// ---- List ------------------------------------------------------------------------

/** m0 IDLE, m1 CONFIGURED, m2 CREATING, the rest SPECULATIVE. */
async function mixedFleet(opts: TestKitOptions = {}): Promise<TestKit> {
  const t = await startTestKit({ machines: 6, ...opts });
  await t.step("create", "m0");
  await steps(t, "m1", ["create", "configure"]);
  await t.call("create", "m2");
  return t;
}

function ids(ms: readonly MachineRecord[]): string[] {
  return ms.map((m) => m.id).sort();
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

// ---- reconcile -------------------------------------------------------------------

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

// ---- close() ---------------------------------------------------------------------

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

// ---- finish(): the first step of a graceful stop ------------------------------

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

// ---- recover(): an operator's way out of FAILED ------------------------------------

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
