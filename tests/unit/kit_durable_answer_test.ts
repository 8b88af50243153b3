// No answer before durable: what a client has seen (an ack, a Get, a List, an
// error) must survive a crash right after it. The state store here commits
// only when the test releases it; every answer, success or error, must stay
// pending while a change it depends on is handed over but not committed,
// and settle once it is. A SIGKILL test cannot show this (commits are too
// fast for a kill to land between them); holding the commit can.

import assert from "node:assert/strict";
import { Code, KitError } from "../../src/kit/errors.ts";
import { State } from "../../src/kit/model.ts";
import { CONFIGURE_DEFAULTS, NO_TOKEN, startTestKit, tok } from "./scripted_backend.ts";
import type { TestKit, VmFact } from "./scripted_backend.ts";
import { nextTurn, settlesNow } from "./watched_store.ts";

interface Case {
  name: string;
  /** Runs with the store committing normally. */
  prepare?(t: TestKit): Promise<void>;
  /** Runs with commits held: changes made here are handed over, not committed. */
  whileHeld?(t: TestKit): Promise<void>;
  answer(t: TestKit): Promise<unknown>;
  /** What the substrate holds at boot. */
  vms?: VmFact[];
  /** "ok", or the KitError code the answer must carry. */
  expect: "ok" | number;
}

/** Finishes the running `kind` job on `id` and waits until the kit has handed the result over. */
async function finish(t: TestKit, kind: "create" | "configure", id: string, ok = true) {
  const job = await t.backend.next(kind, id);
  if (ok) job.succeed();
  else job.fail(new Error("hook exited 1"));
  await t.store.until(id, ok ? (kind === "create" ? State.Idle : State.Configured) : State.Failed);
}

/** The id the kit lists the stray VM under (the removal case). */
let strayId = "";

const CASES: Case[] = [
  {
    name: "Create",
    answer: (t) => t.call("create", "m0"),
    expect: "ok",
  },
  {
    name: "Configure",
    prepare: async (t) => void await t.step("create", "m0"),
    answer: (t) => t.call("configure", "m0"),
    expect: "ok",
  },
  {
    name: "Drain",
    prepare: async (t) => {
      await t.step("create", "m0");
      await t.step("configure", "m0");
    },
    answer: (t) => t.call("drain", "m0"),
    expect: "ok",
  },
  {
    name: "Delete",
    prepare: async (t) => void await t.step("create", "m0"),
    answer: (t) => t.call("delete", "m0"),
    expect: "ok",
  },
  {
    name: "Get showing a completion",
    prepare: async (t) => void await t.call("create", "m0"),
    whileHeld: (t) => finish(t, "create", "m0"),
    answer: async (t) => assert.equal((await t.kit.get("m0")).state, State.Idle),
    expect: "ok",
  },
  {
    name: "List showing a completion",
    prepare: async (t) => void await t.call("create", "m0"),
    whileHeld: (t) => finish(t, "create", "m0"),
    answer: async (t) => {
      const { machines } = await t.kit.list({ states: [State.Idle], maxResults: 0 });
      assert.deepEqual(machines.map((m) => m.id), ["m0"]);
    },
    expect: "ok",
  },
  {
    name: "NOT_FOUND after the token moved the mark",
    answer: (t) => t.call("create", "ghost", tok("s", 1, 1)),
    expect: Code.NotFound,
  },
  {
    name: "NOT_FOUND showing a removal",
    // The substrate holds a VM no slot claims: it is listed IDLE, then deleted.
    vms: [{ machineId: "stray", hostRef: "zone-a/900" }],
    prepare: async (t) => {
      const { machines } = await t.kit.list({ states: [State.Idle], maxResults: 0 });
      strayId = machines[0].id;
      await t.call("delete", strayId);
    },
    whileHeld: async (t) => {
      (await t.backend.next("delete")).succeed();
      await nextTurn(); // the completion runs
      assert.equal(t.kit.size, 2, "the orphan left the inventory");
    },
    answer: (t) => t.kit.get(strayId),
    expect: Code.NotFound,
  },
  {
    name: "FAILED_PRECONDITION against a mark not yet committed",
    whileHeld: (t) => {
      // Passes the fence and moves the mark; its own answer waits for the commit.
      t.call("create", "m0", tok("s", 5, 5)).catch(() => {});
      return Promise.resolve();
    },
    answer: (t) => t.call("create", "m0", tok("s", 5, 5)),
    expect: Code.FailedPrecondition,
  },
  {
    name: "out-of-position after the token moved the mark",
    answer: (t) => t.call("drain", "m0", tok("s", 1, 1)),
    expect: Code.Internal,
  },
  {
    name: "out-of-position showing a FAILED not yet committed",
    prepare: async (t) => {
      await t.step("create", "m0");
      await t.call("configure", "m0");
    },
    whileHeld: (t) => finish(t, "configure", "m0", false),
    answer: (t) => t.call("configure", "m0"),
    expect: Code.Internal,
  },
  {
    name: "INVALID_ARGUMENT after another change",
    prepare: async (t) => {
      await t.step("create", "m0");
      await t.call("create", "m1");
    },
    whileHeld: (t) => finish(t, "create", "m1"),
    answer: (t) =>
      t.kit.configure({ ...CONFIGURE_DEFAULTS, machineId: "m0", token: NO_TOKEN, clusterId: "" }),
    expect: Code.InvalidArgument,
  },
];

for (const c of CASES) {
  Deno.test(`durable answer: ${c.name} waits for its commit`, async () => {
    await using t = await startTestKit({ machines: 2, vms: c.vms });
    await c.prepare?.(t);
    t.store.hold();
    await c.whileHeld?.(t);
    const answer = c.answer(t);
    assert.equal(await settlesNow(answer), false, "the answer went out before its commit");
    t.store.release();
    if (c.expect === "ok") {
      await answer;
    } else {
      await assert.rejects(answer, (e) => e instanceof KitError && e.code === c.expect);
    }
  });
}
