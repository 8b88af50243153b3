// Fencing (src/kit/fence.ts, checked by src/kit/dispatch.ts), in-process against the kit
// (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { Rng } from "../harness/rand.ts";
import { NO_TOKEN, startTestKit, TARGET, tok } from "./scripted_backend.ts";
import type { Kind } from "./scripted_backend.ts";
import { describeOutcome, KINDS, outcome, rejects, untouched } from "./kit_helpers.ts";

const MAX = 2n ** 63n - 1n;
const MIN = -(2n ** 63n);

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
