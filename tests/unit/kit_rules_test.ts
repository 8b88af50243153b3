// What Configure and Drain carry: shard_metadata, cluster_id, grace (src/kit/rules.ts), in-process
// against the kit (kit_helpers.ts says how).

import assert from "node:assert/strict";
import { Code } from "../../src/kit/errors.ts";
import { State } from "../../src/kit/model.ts";
import type { Pairs } from "../../src/kit/model.ts";
import { CONFIGURE_DEFAULTS, NO_TOKEN, startTestKit } from "./scripted_backend.ts";
import { describeOutcome, outcome, rejects, steps, untouched } from "./kit_helpers.ts";

function sorted(p: Pairs): [string, string][] {
  return [...p].map(([k, v]) => [k, v] as [string, string]).sort((a, b) =>
    a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0
  );
}

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
