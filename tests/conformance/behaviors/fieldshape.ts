// Field shape & cost, B801–B807.

import assert from "node:assert/strict";
import {
  assertMapEqual,
  assertOk,
  assertState,
  CapacityType,
  type Harness,
  hostSet,
  type Machine,
  MachineState as St,
  outcome,
  STABLE_STATES,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";

const WELL_KNOWN_LABELS = [
  "instance-type",
  "instance_type",
  "instanceType",
  "zone",
  "availability-zone",
  "availability_zone",
  "capacity-type",
  "capacity_type",
  "capacityType",
];

/** B803's per-state shape. */
function checkShape(m: Machine, where: string) {
  const w = `${where}: ${m.id}`;
  if (m.state === St.SPECULATIVE) {
    assert.ok(!hostSet(m), `${w}: SPECULATIVE with host ${JSON.stringify(m.host)}`);
    assert.equal(m.cluster, "", `${w}: SPECULATIVE with cluster`);
  } else if (m.state === St.IDLE) {
    assert.ok(hostSet(m), `${w}: IDLE without host`);
    assert.equal(m.cluster, "", `${w}: IDLE with cluster`);
  } else if (m.state === St.CONFIGURED) {
    assert.ok(hostSet(m), `${w}: CONFIGURED without host`);
    assert.notEqual(m.cluster, "", `${w}: CONFIGURED without cluster`);
  }
}

/** B806: stable machines with a host have a capacity type and a zone. */
function checkPlacement(m: Machine, where: string) {
  if (!STABLE_STATES.includes(m.state) || !hostSet(m)) return;
  assert.notEqual(
    m.capacity_type,
    CapacityType.UNSPECIFIED,
    `${where}: ${m.id} capacity_type UNSPECIFIED`,
  );
  assert.notEqual(m.zone, "", `${where}: ${m.id} empty zone`);
}

/** B804's quantity grammar: digits, at most one '.', optional binary/decimal suffix. */
export function parseQuantity(q: string): number | undefined {
  const mm = /^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Gi|Mi|Ki|G|M|k|m)?$/.exec(q);
  if (!mm) return undefined;
  const mult: Record<string, number> = {
    Gi: 2 ** 30,
    Mi: 2 ** 20,
    Ki: 2 ** 10,
    G: 1e9,
    M: 1e6,
    k: 1e3,
    m: 1e-3,
  };
  return Number(mm[1]) * (mm[2] ? mult[mm[2]] : 1);
}

async function fromList(h: Harness, id: string): Promise<Machine> {
  const m = (await h.list()).machines.find((x) => x.id === id);
  assert.ok(m, `${id} missing from List`);
  return m;
}

export const fieldshape: Behavior[] = [
  {
    id: "B801",
    title: "every machine has id, state, instance_type and no well-known labels",
    async run(h) {
      const l = await h.list();
      assert.ok(l.machines.length > 0, "empty List");
      for (const m of l.machines) {
        assert.notEqual(m.id, "", "empty id");
        assert.notEqual(m.state, St.UNSPECIFIED, `${m.id}: state UNSPECIFIED`);
        assert.notEqual(m.instance_type, "", `${m.id}: empty instance_type`);
        for (const k of WELL_KNOWN_LABELS) {
          assert.ok(
            !Object.hasOwn(m.labels ?? {}, k),
            `${m.id}: label ${k} must be a top-level field`,
          );
        }
      }
    },
  },
  {
    id: "B802",
    title: "price finite ≥ 0; interruption probability in [0,1]; SPOT ⇒ > 0",
    async run(h) {
      for (const m of (await h.list()).machines) {
        assert.ok(
          Number.isFinite(m.price_per_hour) && m.price_per_hour >= 0,
          `${m.id}: price ${m.price_per_hour}`,
        );
        const p = m.interruption_probability;
        assert.ok(!Number.isNaN(p) && p >= 0 && p <= 1, `${m.id}: interruption_probability ${p}`);
        if (m.capacity_type === CapacityType.SPOT) {
          assert.ok(p > 0, `${m.id}: SPOT with probability 0`);
        }
      }
    },
  },
  {
    id: "B803",
    title: "host and cluster presence match the state, listed and walked",
    async run(h) {
      for (const m of (await h.list()).machines) checkShape(m, "List");
      const m0 = await h.pickSpeculative();
      checkShape(m0, "picked");
      assertOk(await outcome(h.create(m0.id)), "Create");
      checkShape(await h.mustReach(m0.id, St.IDLE), "walked Idle");
      assertOk(await outcome(h.configure(m0.id, "conf-b803")), "Configure");
      checkShape(await h.mustReach(m0.id, St.CONFIGURED), "walked Configured");
      assertOk(await outcome(h.drain(m0.id, 0)), "Drain(0)");
      checkShape(await h.mustReach(m0.id, St.IDLE), "walked Idle again");
    },
  },
  {
    id: "B804",
    title: "resources and allocatable quantities parse; resources > 0, allocatable ≥ 0",
    async run(h) {
      let checked = 0;
      for (const m of (await h.list()).machines) {
        const res = m.resources?.resources ?? {};
        const alloc = m.allocatable?.resources ?? {};
        if (Object.keys(res).length === 0 || Object.keys(alloc).length === 0) continue;
        checked++;
        for (const k of Object.keys(res)) {
          if (!Object.hasOwn(alloc, k)) continue;
          const r = parseQuantity(res[k]);
          const a = parseQuantity(alloc[k]);
          assert.ok(r !== undefined && r > 0, `${m.id}: resources[${k}]=${JSON.stringify(res[k])}`);
          assert.ok(
            a !== undefined && a >= 0,
            `${m.id}: allocatable[${k}]=${JSON.stringify(alloc[k])}`,
          );
        }
      }
      // The Go test skips here; every Proxmox offering carries both maps, so none is a bug.
      assert.ok(checked > 0, "no machine carries both resources and allocatable");
    },
  },
  {
    id: "B805",
    title: "host.provider is non-empty and stable through Get and List",
    async run(h) {
      const w = await h.walkToIdle();
      const provider = w.machine.host?.provider ?? "";
      assert.notEqual(provider, "", "IDLE host.provider is empty");
      const same = async (where: string) => {
        assert.equal((await h.get(w.id)).host?.provider, provider, `Get at ${where}`);
        assert.equal((await fromList(h, w.id)).host?.provider, provider, `List at ${where}`);
      };
      await same("Idle");
      assertOk(await outcome(h.configure(w.id, "conf-b805")), "Configure");
      await h.mustReach(w.id, St.CONFIGURED);
      await same("Configured");
      assertOk(await outcome(h.drain(w.id, 5)), "Drain");
      await h.mustReach(w.id, St.IDLE);
      await same("Idle again");
    },
  },
  {
    id: "B806",
    title: "hosted stable machines have capacity_type and zone",
    async run(h) {
      for (const m of (await h.list()).machines) checkPlacement(m, "List");
      const w = await h.walkToIdle();
      checkPlacement(w.machine, "walked Idle");
      assert.ok(hostSet(w.machine), "walked Idle has no host");
      assertOk(await outcome(h.configure(w.id, "conf-b806")), "Configure");
      checkPlacement(await h.mustReach(w.id, St.CONFIGURED), "walked Configured");
    },
  },
  {
    id: "B807",
    title: "Delete returns the slot to SPECULATIVE with host, cluster and map cleared",
    async run(h) {
      await h.requireCapabilities({ delete: true });
      const w = await h.walkToConfigured("conf-b807", { a: "1", b: "2" });
      assertOk(await outcome(h.drain(w.id, 0)), "Drain(0)");
      const idle = await h.mustReach(w.id, St.IDLE);
      assert.ok(hostSet(idle), "IDLE without host");
      assertOk(await outcome(h.delete(w.id)), "Delete");
      const s = await h.mustReach(w.id, St.SPECULATIVE);
      assertState(s, St.SPECULATIVE, "after Delete");
      assert.ok(!hostSet(s), `host still set: ${JSON.stringify(s.host)}`);
      assert.equal(s.cluster, "");
      assertMapEqual(s.shard_metadata, {}, "metadata after Delete");
    },
  },
];
