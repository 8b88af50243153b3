// Lifecycle & state machine, B101–B109.

import assert from "node:assert/strict";
import {
  assertMapEqual,
  assertOk,
  assertState,
  type Harness,
  hostSet,
  type Machine,
  MachineState as St,
  outcome,
  STABILITY_MS,
  STABLE_STATES,
  stateName,
  TRANSITIONAL_STATES,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";

/** Idle and clean: no cluster, no metadata, no error. */
function assertCleanIdle(m: Machine, what: string) {
  assertState(m, St.IDLE, what);
  assert.equal(m.cluster, "", `${what}: cluster`);
  assertMapEqual(m.shard_metadata, {}, `${what}: metadata`);
  assert.equal(m.last_error, "", `${what}: last_error`);
}

/** Every state seen in a trace is in `allowed`. */
function onlyStates(states: number[], allowed: number[], what: string) {
  const bad = states.filter((s) => !allowed.includes(s));
  assert.equal(
    bad.length,
    0,
    `${what}: unexpected ${bad.map(stateName).join(",")} in ${states.map(stateName).join("→")}`,
  );
}

const LEGAL_STEPS = new Set([
  "SPECULATIVE>CREATING",
  "SPECULATIVE>IDLE",
  "CREATING>IDLE",
  "IDLE>CONFIGURING",
  "IDLE>CONFIGURED",
  "CONFIGURING>CONFIGURED",
  "CONFIGURED>DRAINING",
  "CONFIGURED>IDLE",
  "DRAINING>IDLE",
]);

/** Trace one call until `target`, appending de-duplicated states to `all`. */
async function traced(
  h: Harness,
  id: string,
  call: () => Promise<unknown>,
  target: number,
  all: number[],
) {
  await call();
  const t = await h.trace(id, [target]);
  for (const s of t.states) if (all.at(-1) !== s) all.push(s);
  return t;
}

export const lifecycle: Behavior[] = [
  {
    id: "B101",
    title: "walk to Idle is clean, 4 configure/drain cycles",
    async run(h) {
      const w = await h.walkToIdle();
      assertCleanIdle(await h.get(w.id), "after Create");
      for (let i = 0; i < 4; i++) {
        assertOk(
          await outcome(
            h.configure(w.id, "conf-b101", { "bigfleet.lucy.sh/cycle": "round", k: "v" }),
          ),
          `cycle ${i}: Configure`,
        );
        const c = await h.mustReach(w.id, St.CONFIGURED);
        assert.notEqual(c.cluster, "", `cycle ${i}: CONFIGURED without cluster`);
        assertOk(await outcome(h.drain(w.id, 5)), `cycle ${i}: Drain`);
        await h.mustReach(w.id, St.IDLE);
        assertCleanIdle(await h.get(w.id), `cycle ${i}: back at Idle`);
      }
    },
  },
  {
    id: "B103",
    title: "Configure shows only CONFIGURING on the way to CONFIGURED",
    async run(h) {
      const w = await h.walkToIdle();
      assertOk(await outcome(h.configure(w.id, "conf-b103", { a: "1" })), "Configure");
      const t = await h.trace(w.id, [St.CONFIGURED]);
      onlyStates(t.states, [St.IDLE, St.CONFIGURING, St.CONFIGURED], "Configure trace");
      await h.staysIn(w.id, St.CONFIGURED, STABILITY_MS);
    },
  },
  {
    id: "B104",
    title: "Drain shows only DRAINING on the way to IDLE",
    async run(h) {
      const w = await h.walkToConfigured("conf-b104", { a: "1" });
      assertOk(await outcome(h.drain(w.id, 5)), "Drain");
      const t = await h.trace(w.id, [St.IDLE]);
      onlyStates(t.states, [St.CONFIGURED, St.DRAINING, St.IDLE], "Drain trace");
      await h.staysIn(w.id, St.IDLE, STABILITY_MS);
    },
  },
  {
    id: "B105",
    title: "Create→Configure→Drain uses only legal state steps",
    async run(h) {
      const m = await h.pickSpeculative();
      const all: number[] = [St.SPECULATIVE];
      await traced(h, m.id, () => h.create(m.id), St.IDLE, all);
      await traced(h, m.id, () => h.configure(m.id, "conf-b105", { x: "y" }), St.CONFIGURED, all);
      await traced(h, m.id, () => h.drain(m.id, 5), St.IDLE, all);
      for (let i = 1; i < all.length; i++) {
        const step = `${stateName(all[i - 1])}>${stateName(all[i])}`;
        assert.ok(LEGAL_STEPS.has(step), `illegal step ${step} in ${all.map(stateName).join("→")}`);
      }
    },
  },
  {
    id: "B106",
    title: "the cluster is bound from CONFIGURING until the Drain completes",
    async run(h) {
      const w = await h.walkToIdle();
      assert.equal(w.machine.cluster, "", "IDLE has a cluster");
      assertOk(await outcome(h.configure(w.id, "conf-b106", { a: "1" })), "Configure");
      const t = await h.trace(w.id, [St.CONFIGURED]);
      for (const s of t.snapshots) {
        if (s.state === St.CONFIGURING) {
          assert.notEqual(s.cluster, "", "CONFIGURING snapshot without cluster");
        }
      }
      assert.equal(t.final.cluster, "conf-b106");
      assertOk(await outcome(h.drain(w.id, 5)), "Drain");
      assert.equal((await h.mustReach(w.id, St.IDLE)).cluster, "", "cluster after Drain");
    },
  },
  {
    id: "B107",
    title: "host unset while SPECULATIVE, set at every later stable state",
    async run(h) {
      const m = await h.pickSpeculative();
      assertState(m, St.SPECULATIVE, "picked");
      assert.ok(!hostSet(m), `SPECULATIVE with host ${JSON.stringify(m.host)}`);
      const steps: [string, () => Promise<unknown>, number][] = [
        ["Create", () => h.create(m.id), St.IDLE],
        ["Configure", () => h.configure(m.id, "conf-b107"), St.CONFIGURED],
        ["Drain", () => h.drain(m.id, 5), St.IDLE],
      ];
      for (const [name, call, target] of steps) {
        assertOk(await outcome(call()), name);
        const g = await h.mustReach(m.id, target);
        assert.ok(STABLE_STATES.includes(g.state), `${name}: settled in ${stateName(g.state)}`);
        assert.ok(hostSet(g), `${name}: ${stateName(g.state)} without host`);
      }
    },
  },
  {
    id: "B108",
    title: "stable states stay put: no spontaneous transitions",
    async run(h) {
      const w = await h.walkToConfigured("conf-b108", { k: "v" });
      const still = async (state: number) => {
        await h.staysIn(w.id, state, STABILITY_MS);
        for (let i = 0; i < 4; i++) await h.neverReaches(w.id, TRANSITIONAL_STATES, STABILITY_MS);
        assertState(await h.get(w.id), state, "after the windows");
      };
      await still(St.CONFIGURED);
      assertOk(await outcome(h.drain(w.id, 5)), "Drain");
      await h.mustReach(w.id, St.IDLE);
      await still(St.IDLE);
    },
  },
  {
    id: "B109",
    title: "Delete shows only DELETING and returns to SPECULATIVE without host",
    async run(h) {
      await h.requireCapabilities({ delete: true });
      const w = await h.walkToIdle();
      assertOk(await outcome(h.delete(w.id)), "Delete");
      const t = await h.trace(w.id, [St.SPECULATIVE]);
      onlyStates(t.states, [St.IDLE, St.DELETING, St.SPECULATIVE], "Delete trace");
      const s = await h.staysIn(w.id, St.SPECULATIVE, STABILITY_MS);
      assert.ok(!hostSet(s), `SPECULATIVE with host ${JSON.stringify(s.host)}`);
    },
  },
];
