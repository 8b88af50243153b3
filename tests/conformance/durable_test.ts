// Durability lane (catalog §3.1): B1001–B1005 and B1007 by SIGKILL and restart
// with the same --state (Deno KV) and seed 64; the strong B1006 by killing a
// machine mid-CONFIGURING; plus restart invariants the product promises
// (no re-seed, stale cursors return everything, op ids unique, big maps exact).

import assert from "node:assert/strict";
import {
  assertCode,
  assertMapEqual,
  assertNonFpRejection,
  assertOk,
  Code,
  fakeProviderArgs,
  Harness,
  isOwnProvider,
  type Machine,
  MachineState as St,
  opIdOf,
  outcome,
  type ProviderProcess,
  startProvider,
  stateName,
  token,
  TRANSITIONAL_STATES,
} from "../harness/mod.ts";
import { b503Map } from "./behaviors/metadata.ts";

const SEED = 64;
const POLL = 100; // the durability lane's pollState cadence
const SETTLE = 20_000;
const DUR_MD = { "d/k": "v", "d/k2": "v2" };
const DUR_BLOB = new TextEncoder().encode("# durable\n");
const opts = { sanitizeOps: false, sanitizeResources: false };

interface Lifetime {
  proc: ProviderProcess;
  h: Harness;
}

async function boot(
  state: string,
  extra: { seed?: number; fakeDelay?: string } = {},
): Promise<Lifetime> {
  const proc = await startProvider({
    args: fakeProviderArgs({ seed: extra.seed ?? SEED, state, fakeDelay: extra.fakeDelay }),
  });
  return { proc, h: new Harness(proc.addr, { deadlineMs: 10_000 }) };
}

/** SIGKILL, as the runner does: whatever is not durable is lost. */
async function kill(l: Lifetime) {
  l.h.close();
  await l.proc.stop();
}

/** Speculative machines the lane may use: not excluded, no create-fault label. */
async function freshSpeculative(h: Harness, exclude: Set<string>): Promise<string> {
  const l = await h.list({ states: [St.SPECULATIVE] });
  const m = l.machines.find((x) =>
    !exclude.has(x.id) && x.labels?.["conformance.fault/create"] !== "error"
  );
  assert.ok(m, "no usable Speculative machine left");
  exclude.add(m.id);
  return m.id;
}

function stateMap(ms: Machine[]): Map<string, number> {
  return new Map(ms.map((m) => [m.id, m.state]));
}

function assertSameStates(got: Map<string, number>, want: Map<string, number>, what: string) {
  assert.equal(got.size, want.size, `${what}: ${got.size} machines, want ${want.size}`);
  for (const [id, s] of want) {
    assert.ok(got.has(id), `${what}: ${id} missing`);
    assert.equal(
      stateName(got.get(id)),
      stateName(s),
      `${what}: ${id} is ${stateName(got.get(id))}, was ${stateName(s)}`,
    );
  }
}

// ---- Shared across the tests below, in order (as the runner's lane is one sequence).
const ctx: {
  dir?: string;
  state?: string;
  life?: Lifetime;
  F?: string;
  C?: string;
  ops: string[];
  used: Set<string>;
  snapshot?: Map<string, number>;
  cursorBoot?: Uint8Array;
  cursorKill?: Uint8Array;
} = { ops: [], used: new Set() };

function life(): Lifetime {
  assert.ok(ctx.life, "the durable setup did not complete");
  return ctx.life;
}

Deno.test({
  name: "[durable] setup: seed 64 with --state, fence/configure, snapshot, SIGKILL, restart",
  ...opts,
  async fn() {
    ctx.dir = await Deno.makeTempDir({ prefix: "bfconf-durable-" });
    ctx.state = `${ctx.dir}/durable-state.kv`;
    const l1 = await boot(ctx.state);
    const h = l1.h;
    ctx.cursorBoot = (await h.list()).revision;

    ctx.F = await freshSpeculative(h, ctx.used);
    ctx.ops.push(
      opIdOf(await outcome(h.create(ctx.F, token("durA", 3, 7))), "Create F durA (3,7)"),
    );
    await h.mustReach(ctx.F, St.IDLE, SETTLE, POLL);

    ctx.C = await freshSpeculative(h, ctx.used);
    ctx.ops.push(opIdOf(await outcome(h.create(ctx.C)), "Create C"));
    await h.mustReach(ctx.C, St.IDLE, SETTLE, POLL);
    ctx.ops.push(
      opIdOf(
        await outcome(h.configure(ctx.C, "durable-cluster", DUR_MD, undefined, DUR_BLOB)),
        "Configure C",
      ),
    );
    await h.mustReach(ctx.C, St.CONFIGURED, SETTLE, POLL);

    const l = await h.list();
    ctx.snapshot = stateMap(l.machines);
    ctx.cursorKill = l.revision;
    await kill(l1); // immediately after the List

    ctx.life = await boot(ctx.state);
  },
});

Deno.test({
  name: "[durable] B1001 the fence mark survives: durA (3,7) replay is FAILED_PRECONDITION",
  ...opts,
  async fn() {
    const r = await outcome(life().h.create(ctx.F!, token("durA", 3, 7)));
    assertCode(r, Code.FAILED_PRECONDITION, "Create F durA (3,7) after restart");
  },
});

Deno.test({
  name: "[durable] B1002 the idempotency map survives: identical Configure returns the same op id",
  ...opts,
  async fn() {
    const r = await outcome(
      life().h.configure(ctx.C!, "durable-cluster", DUR_MD, undefined, DUR_BLOB),
    );
    assert.equal(opIdOf(r, "identical Configure after restart"), ctx.ops[2]);
  },
});

Deno.test({
  name:
    "[durable] B1003 the binding survives: cluster and shard_metadata of the Configured machine",
  ...opts,
  async fn() {
    const g = await life().h.get(ctx.C!);
    assert.equal(g.cluster, "durable-cluster");
    assertMapEqual(g.shard_metadata, DUR_MD, "shard_metadata after restart");
  },
});

Deno.test({
  name: "[durable] B1004 the inventory survives: id→state identical to the pre-kill List",
  ...opts,
  async fn() {
    const l = await life().h.list();
    assertSameStates(stateMap(l.machines), ctx.snapshot!, "List after restart");
  },
});

Deno.test({
  name: "[durable] B1005 revision non-empty; a new Create gets an op id never issued before",
  ...opts,
  async fn() {
    const h = life().h;
    assert.ok((await h.list()).revision.length > 0, "empty revision after restart");
    const id = await freshSpeculative(h, ctx.used);
    const op = opIdOf(await outcome(h.create(id)), "Create on a fresh machine");
    assert.ok(!ctx.ops.includes(op), `op id ${op} was already issued before the restart`);
    ctx.ops.push(op);
    await h.mustReach(id, St.IDLE, SETTLE, POLL);
  },
});

Deno.test({
  name: "[durable] B1007 a new shard durB (1,1) is accepted after the restart",
  ...opts,
  async fn() {
    const h = life().h;
    const id = await freshSpeculative(h, ctx.used);
    ctx.ops.push(opIdOf(await outcome(h.create(id, token("durB", 1, 1))), "Create durB (1,1)"));
    await h.mustReach(id, St.IDLE, SETTLE, POLL);
  },
});

Deno.test({
  name: "[durable] stale cursors issued before the restart return the full fleet",
  ...opts,
  async fn() {
    const h = life().h;
    const fleet = (await h.list()).machines.map((m) => m.id);
    for (
      const [name, c] of [["boot", ctx.cursorBoot!], ["pre-kill head", ctx.cursorKill!]] as const
    ) {
      const got = new Set((await h.list({ since_revision: c })).machines.map((m) => m.id));
      const missing = fleet.filter((id) => !got.has(id));
      assert.equal(
        missing.length,
        0,
        `cursor ${name}: ${missing.length}/${fleet.length} machines missing`,
      );
    }
  },
});

Deno.test({
  name:
    "[durable] second restart with --seed-count=100 only adds the new slots; a 2 MiB map survives byte-exactly",
  ...opts,
  async fn() {
    const h = life().h;
    // A B503-sized map, written just before the kill.
    const id = await freshSpeculative(h, ctx.used);
    ctx.ops.push(opIdOf(await outcome(h.create(id)), "Create for the big map"));
    await h.mustReach(id, St.IDLE, SETTLE, POLL);
    // This provider accepts maps up to 8 MiB (docs/design.md#order-of-checks-and-idempotency);
    // the contract (B503) also lets a provider refuse one with INVALID_ARGUMENT.
    const r = await outcome(h.configure(id, "durable-big", b503Map()));
    const accepted = isOwnProvider() || r.code !== Code.INVALID_ARGUMENT;
    if (accepted) {
      ctx.ops.push(opIdOf(r, "Configure of the 2 MiB map"));
      await h.mustReach(id, St.CONFIGURED, 30_000, POLL);
    }

    const before = stateMap((await h.list()).machines);
    await kill(life());
    ctx.life = await boot(ctx.state!, { seed: 100 });
    const after = (await life().h.list()).machines;
    assert.equal(after.length, 100, `fleet size after restart with --seed-count=100`);
    // Every machine of the earlier life is as it was; the new slots are SPECULATIVE.
    const afterStates = stateMap(after);
    assertSameStates(
      new Map([...afterStates].filter(([id]) => before.has(id))),
      before,
      "List after the second restart",
    );
    for (const [id, s] of afterStates) {
      if (!before.has(id)) assert.equal(stateName(s), "SPECULATIVE", `new slot ${id}`);
    }

    if (!accepted) return;
    const g = await life().h.get(id);
    assert.equal(g.cluster, "durable-big");
    assertMapEqual(g.shard_metadata, b503Map(), "2 MiB map after restart");
  },
});

Deno.test({
  name: "[durable] op ids never repeat across three lifetimes",
  ...opts,
  async fn() {
    const h = life().h;
    for (let i = 0; i < 3; i++) {
      const id = await freshSpeculative(h, ctx.used);
      ctx.ops.push(opIdOf(await outcome(h.create(id)), `Create ${i}`));
      await h.mustReach(id, St.IDLE, SETTLE, POLL);
      ctx.ops.push(opIdOf(await outcome(h.configure(id, "durable-ops")), `Configure ${i}`));
    }
    assert.equal(new Set(ctx.ops).size, ctx.ops.length, `repeated op ids in ${ctx.ops.join(", ")}`);
  },
});

Deno.test({
  name: "[durable] stop and clean up",
  ...opts,
  async fn() {
    if (ctx.life) await kill(ctx.life);
    if (ctx.dir) await Deno.remove(ctx.dir, { recursive: true });
  },
});

// ---- B1006, strong variant: a machine killed while CONFIGURING comes back FAILED.

Deno.test({
  name: "[durable] B1006 a machine SIGKILLed mid-CONFIGURING comes back FAILED with last_error",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-b1006-" });
    const state = `${dir}/b1006-state.kv`;
    const lives: Lifetime[] = [];
    try {
      // Lifetime 1, instant fake: walk a machine to Idle.
      let l = await boot(state);
      lives.push(l);
      const id = await freshSpeculative(l.h, new Set());
      assertOk(await outcome(l.h.create(id)), "Create");
      await l.h.mustReach(id, St.IDLE, SETTLE, POLL);
      await l.h.list();
      await kill(l);

      // Lifetime 2, 30 s fake delay: Configure and catch it CONFIGURING.
      l = await boot(state, { fakeDelay: "30s" });
      lives.push(l);
      assertOk(
        await outcome(l.h.configure(id, "durable-b1006", { k: "v" }, undefined, DUR_BLOB)),
        "Configure",
      );
      await l.h.mustReach(id, St.CONFIGURING, 5_000, POLL);
      await kill(l);

      // Lifetime 3: the interrupted transition is FAILED, and nothing is left transitional.
      l = await boot(state);
      lives.push(l);
      const g = await l.h.get(id);
      assert.equal(stateName(g.state), "FAILED", `after restart: ${stateName(g.state)}`);
      assert.notEqual(g.last_error, "", "FAILED without last_error");
      assert.match(
        g.last_error,
        /restart/i,
        "last_error must say a restart interrupted it (product §2)",
      );
      const stuck = (await l.h.list()).machines.filter((m) =>
        TRANSITIONAL_STATES.includes(m.state)
      );
      assert.equal(
        stuck.length,
        0,
        `transitional after restart: ${stuck.map((m) => m.id).join(",")}`,
      );
      // FAILED stays terminal across the restart.
      assertNonFpRejection(
        await outcome(l.h.configure(id, "recover-cluster")),
        "Configure on FAILED",
      );
      assert.equal((await l.h.get(id)).last_error, g.last_error, "last_error changed");
    } finally {
      for (const l of lives) await kill(l);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// ---- Acks and rejected-but-fenced calls are durable the moment they are answered.

Deno.test({
  name: "[durable] an ack and a mark moved by a rejected call survive an immediate SIGKILL",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-ack-" });
    const state = `${dir}/ack-state.kv`;
    const lives: Lifetime[] = [];
    try {
      let l = await boot(state, { fakeDelay: "30s" });
      lives.push(l);
      const used = new Set<string>();
      const acked = await freshSpeculative(l.h, used);
      const ack = assertOk(await outcome(l.h.create(acked)), "Create");
      assert.equal(stateName(ack.machine?.state), "CREATING", "the ack should show CREATING");
      const fenced = await freshSpeculative(l.h, used);
      assertNonFpRejection(
        await outcome(l.h.drain(fenced, 0, token("durC", 5, 5))),
        "Drain (5,5) on SPECULATIVE",
      );
      await kill(l); // no read in between: only the answers themselves were seen

      l = await boot(state);
      lives.push(l);
      const g = await l.h.get(acked);
      assert.equal(
        stateName(g.state),
        "FAILED",
        "an acked, interrupted Create must come back FAILED",
      );
      assert.notEqual(g.last_error, "");
      assertCode(
        await outcome(l.h.create(fenced, token("durC", 5, 4))),
        Code.FAILED_PRECONDITION,
        "(5,4)",
      );
      assertOk(await outcome(l.h.create(fenced, token("durC", 5, 6))), "(5,6)");
    } finally {
      for (const x of lives) await kill(x);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// A fresh start accepts before its first state is committed (the commit runs
// behind the listener): a Create acknowledged at once must still survive.
Deno.test({
  name:
    "[durable] a Create acknowledged the moment a fresh 20,000-slot start accepts survives a SIGKILL, its fence mark too",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-durable-first-" });
    const state = `${dir}/first-state.kv`;
    try {
      const l1 = await boot(state, { seed: 20_000 });
      const first = (await l1.h.list({ states: [St.SPECULATIVE], max_results: 1 })).machines[0];
      assert.ok(first, "no Speculative machine listed");
      assertOk(await outcome(l1.h.create(first.id, token("first", 1, 1))), "Create at once");
      await kill(l1);
      const l2 = await boot(state, { seed: 20_000 });
      try {
        const g = await l2.h.get(first.id);
        assert.notEqual(stateName(g.state), stateName(St.SPECULATIVE), "the Create was lost");
        assertCode(
          await outcome(l2.h.create(first.id, token("first", 1, 1))),
          Code.FAILED_PRECONDITION,
          "the fence mark's replay after the restart",
        );
      } finally {
        await kill(l2);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
