// The upstream baseline (bigfleet test/conformance, TestConformance_*), in
// source order: conformance_test.go, fencing_test.go, metadata_test.go.
// Its helpers poll every 100 ms and each test runs under one context budget.

import assert from "node:assert/strict";
import {
  assertCode,
  assertCodeIn,
  assertMapEqual,
  assertNonFpRejection,
  assertOk,
  assertState,
  bytesEqual,
  Code,
  type Harness,
  MachineState as St,
  outcome,
  sleep,
  stateName,
  token,
  withBudget,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const UPSTREAM_POLL = 100;

/** mustReachState: poll every 100 ms. */
function reach(h: Harness, id: string, state: number, ms: number) {
  return h.mustReach(id, state, ms, UPSTREAM_POLL);
}

/** `conformance-fence-<prefix>-<unixnano>`. */
function fenceShard(prefix: string) {
  return `conformance-fence-${prefix}-${BigInt(Date.now()) * 1_000_000n}-${
    Math.random().toString(36).slice(2, 8)
  }`;
}

async function fencedCreate(h: Harness, id: string, shard: string, e: number, s: number) {
  return await outcome(h.create(id, token(shard, e, s)));
}

/** Walk to CONFIGURED with 10 s per step, as the upstream helpers do. */
async function toConfigured(
  h: Harness,
  cluster: string,
  md?: Record<string, string>,
  blob?: string,
) {
  const m = await h.pickSpeculative();
  assertOk(await outcome(h.create(m.id)), "Create");
  await reach(h, m.id, St.IDLE, 10_000);
  const ack = assertOk(
    await outcome(h.configure(m.id, cluster, md, undefined, enc(blob ?? "# conformance\n"))),
    "Configure",
  );
  await reach(h, m.id, St.CONFIGURED, 10_000);
  return { id: m.id, op: ack.operation_id };
}

function nonEmptyOp(op: string, what: string) {
  assert.notEqual(op, "", `${what}: operation_id must be non-empty`);
}

export const baseline: Behavior[] = [
  {
    id: "baseline FullLifecycle",
    title: "Create→Configure→Drain→Delete within one 30 s budget",
    run: (h) =>
      withBudget(30_000, "FullLifecycle", async () => {
        const m = await h.pickSpeculative();
        const c = assertOk(await outcome(h.create(m.id)), "Create");
        nonEmptyOp(c.operation_id, "Create");
        await reach(h, m.id, St.IDLE, 10_000);
        const cf = assertOk(
          await outcome(
            h.configure(
              m.id,
              "conformance-cluster",
              undefined,
              undefined,
              enc("# conformance bootstrap\n"),
            ),
          ),
          "Configure",
        );
        nonEmptyOp(cf.operation_id, "Configure");
        await reach(h, m.id, St.CONFIGURED, 10_000);
        assertOk(await outcome(h.drain(m.id, 5)), "Drain(5)");
        await reach(h, m.id, St.IDLE, 30_000);
        const d = await outcome(h.delete(m.id));
        if (!d.ok && d.code === Code.UNIMPLEMENTED) return; // upstream: passes and ends here
        assertOk(d, "Delete");
        await reach(h, m.id, St.SPECULATIVE, 10_000);
      }),
  },
  {
    id: "baseline CreateIdempotent",
    title: "two back-to-back Creates return the same operation_id",
    run: (h) =>
      withBudget(30_000, "CreateIdempotent", async () => {
        const m = await h.pickSpeculative();
        const a = assertOk(await outcome(h.create(m.id)), "Create #1");
        const b = assertOk(await outcome(h.create(m.id)), "Create #2");
        assert.equal(b.operation_id, a.operation_id, "Create must be idempotent");
      }),
  },
  {
    id: "baseline ConfigureIdempotent",
    title: "two identical Configures return the same operation_id",
    run: (h) =>
      withBudget(30_000, "ConfigureIdempotent", async () => {
        const m = await h.pickSpeculative();
        assertOk(await outcome(h.create(m.id)), "Create");
        await reach(h, m.id, St.IDLE, 10_000);
        const a = assertOk(await outcome(h.configure(m.id, "conformance-idem")), "Configure #1");
        const b = assertOk(await outcome(h.configure(m.id, "conformance-idem")), "Configure #2");
        assert.equal(b.operation_id, a.operation_id, "Configure must be idempotent");
      }),
  },
  {
    id: "baseline DrainIdempotent",
    title: "two Drains (grace 30) return the same operation_id",
    run: (h) =>
      withBudget(30_000, "DrainIdempotent", async () => {
        const { id } = await toConfigured(h, "conformance-idem-drain");
        const a = assertOk(await outcome(h.drain(id, 30)), "Drain #1");
        const b = assertOk(await outcome(h.drain(id, 30)), "Drain #2");
        assert.equal(b.operation_id, a.operation_id, "Drain must be idempotent");
      }),
  },
  {
    id: "baseline DeleteIdempotent",
    title: "two Deletes return the same operation_id",
    run: (h) =>
      withBudget(30_000, "DeleteIdempotent", async () => {
        const m = await h.pickSpeculative();
        assertOk(await outcome(h.create(m.id)), "Create");
        await reach(h, m.id, St.IDLE, 10_000);
        const a = await outcome(h.delete(m.id));
        if (!a.ok && a.code === Code.UNIMPLEMENTED) return; // upstream skips
        const first = assertOk(a, "Delete #1");
        const second = assertOk(await outcome(h.delete(m.id)), "Delete #2");
        assert.equal(second.operation_id, first.operation_id, "Delete must be idempotent");
      }),
  },
  {
    id: "baseline GetUnknownMachine",
    title: "Get of an unknown id is NOT_FOUND",
    run: async (h) =>
      assertCode(
        await outcome(h.get("definitely-not-a-real-machine-id")),
        Code.NOT_FOUND,
        "Get unknown",
      ),
  },
  {
    id: "baseline DeleteUnknownMachine",
    title: "Delete of an unknown id is NOT_FOUND or UNIMPLEMENTED",
    run: async (h) =>
      assertCodeIn(
        await outcome(h.delete("nonexistent")),
        [Code.NOT_FOUND, Code.UNIMPLEMENTED],
        "Delete unknown",
      ),
  },
  {
    id: "baseline ListFiltersByState",
    title: "List(IDLE) returns only IDLE machines",
    run: async (h) => {
      const l = await h.list({ states: [St.IDLE] });
      for (const m of l.machines) assertState(m, St.IDLE, "List(IDLE)");
    },
  },
  {
    id: "baseline ListMaxResults",
    title: "List(max_results=1) returns at most one machine",
    run: async (h) => {
      const l = await h.list({ max_results: 1 });
      assert.ok(l.machines.length <= 1, `got ${l.machines.length} machines`);
    },
  },
  {
    id: "baseline LabelShape",
    title: "every machine has an instance_type and a specified state",
    run: async (h) => {
      const l = await h.list();
      assert.ok(l.machines.length > 0, "the provider lists no machines");
      for (const m of l.machines) {
        assert.notEqual(m.instance_type, "", `${m.id}: empty instance_type`);
        assert.notEqual(m.state, St.UNSPECIFIED, `${m.id}: state UNSPECIFIED`);
      }
    },
  },
  {
    id: "baseline CostFieldBounds",
    title: "price ≥ 0 and interruption probability in [0,1], never NaN",
    run: async (h) => {
      const l = await h.list();
      assert.ok(l.machines.length > 0, "the provider lists no machines");
      for (const m of l.machines) {
        assert.ok(
          !Number.isNaN(m.price_per_hour) && m.price_per_hour >= 0,
          `${m.id}: price ${m.price_per_hour}`,
        );
        const p = m.interruption_probability;
        assert.ok(!Number.isNaN(p) && p >= 0 && p <= 1, `${m.id}: interruption_probability ${p}`);
      }
    },
  },
  {
    id: "baseline ListRevisionAdvances",
    title: "the List revision changes across a Create that reaches IDLE within 5 s",
    run: (h) =>
      withBudget(30_000, "ListRevisionAdvances", async () => {
        const r0 = (await h.list()).revision;
        const m = await h.pickSpeculative();
        assertOk(await outcome(h.create(m.id)), "Create");
        await reach(h, m.id, St.IDLE, 5_000);
        const r1 = (await h.list()).revision;
        if (r0.length > 0) assert.ok(!bytesEqual(r0, r1), "revision did not change");
      }),
  },
  {
    id: "baseline DrainOnSpeculative",
    title: "Drain on a SPECULATIVE machine fails with a non-FP code",
    run: async (h) => {
      const m = await h.pickSpeculative();
      assertNonFpRejection(await outcome(h.drain(m.id, 5)), "Drain on SPECULATIVE");
    },
  },
  {
    id: "baseline TransitionalStateObservability",
    title: "a Create is observed as SPECULATIVE/CREATING/IDLE and reaches IDLE within 10 s",
    // Upstream accepts any of the three at any point. Every provider must at
    // least move forward through them; this one answers after the state
    // change, so its ack shows CREATING (docs/design.md#order-of-checks-and-idempotency).
    run: (h) =>
      withBudget(10_000, "TransitionalStateObservability", async () => {
        const t0 = Date.now();
        const m = await h.pickSpeculative();
        const ack = assertOk(await outcome(h.create(m.id)), "Create");
        const order: number[] = [St.SPECULATIVE, St.CREATING, St.IDLE];
        const seen: number[] = [ack.machine?.state ?? St.SPECULATIVE];
        const pollEnd = Date.now() + 1_000;
        while (Date.now() < pollEnd && seen.at(-1) !== St.IDLE) {
          seen.push((await h.get(m.id)).state);
          await sleep(5);
        }
        await reach(h, m.id, St.IDLE, Math.max(0, 10_000 - (Date.now() - t0)));
        const steps = seen.map((s) => order.indexOf(s));
        assert.ok(
          steps.every((s, i) => s >= 0 && (i === 0 || s >= steps[i - 1])),
          `observed ${seen.map(stateName).join(" → ")}: only SPECULATIVE, CREATING, IDLE, forward`,
        );
        if (h.opts.ownProvider) {
          assert.equal(stateName(seen[0]), "CREATING", "this provider's ack shows CREATING");
        }
      }),
  },
  {
    id: "baseline DrainGraceTimeout",
    title: "Drain(grace 0) ends in IDLE (or FAILED with last_error) within 10 s",
    run: (h) =>
      withBudget(30_000, "DrainGraceTimeout", async () => {
        const { id } = await toConfigured(h, "conformance-grace");
        assertOk(await outcome(h.drain(id, 0)), "Drain(0)");
        const end = Date.now() + 10_000;
        while (Date.now() < end) {
          const g = await h.get(id);
          if (g.state === St.IDLE) return;
          if (g.state === St.FAILED) {
            assert.notEqual(g.last_error, "", "FAILED without last_error");
            return;
          }
          assert.notEqual(g.state, St.CONFIGURED, "machine returned to CONFIGURED after Drain");
          await sleep(50);
        }
        assert.fail("machine neither IDLE nor FAILED 10 s after Drain(0)");
      }),
  },
  {
    id: "baseline DeleteOnConfigured",
    title: "Delete on a CONFIGURED machine fails non-FP and leaves it CONFIGURED",
    run: (h) =>
      withBudget(30_000, "DeleteOnConfigured", async () => {
        const { id } = await toConfigured(h, "conformance-delete-configured");
        const d = await outcome(h.delete(id));
        if (!d.ok && d.code === Code.UNIMPLEMENTED) return;
        assertNonFpRejection(d, "Delete on CONFIGURED");
        assertState(await h.get(id), St.CONFIGURED, "after the rejected Delete");
      }),
  },
  // ---- fencing_test.go
  {
    id: "baseline FencingUnknownShardAccepted",
    title: "first contact (1,1) is OK; its replay is FAILED_PRECONDITION",
    run: (h) =>
      withBudget(30_000, "FencingUnknownShardAccepted", async () => {
        const m = await h.pickSpeculative();
        const s = fenceShard("unknown");
        assertOk(await fencedCreate(h, m.id, s, 1, 1), "(1,1)");
        assertCode(await fencedCreate(h, m.id, s, 1, 1), Code.FAILED_PRECONDITION, "(1,1) replay");
      }),
  },
  {
    id: "baseline FencingStaleEpochRejected",
    title: "(2,1) OK then (1,99) is FAILED_PRECONDITION",
    run: (h) =>
      withBudget(30_000, "FencingStaleEpochRejected", async () => {
        const m = await h.pickSpeculative();
        const s = fenceShard("epoch");
        assertOk(await fencedCreate(h, m.id, s, 2, 1), "(2,1)");
        assertCode(await fencedCreate(h, m.id, s, 1, 99), Code.FAILED_PRECONDITION, "(1,99)");
      }),
  },
  {
    id: "baseline FencingStaleSequenceRejected",
    title: "(1,5) OK; (1,5) and (1,4) are FAILED_PRECONDITION",
    run: (h) =>
      withBudget(30_000, "FencingStaleSequenceRejected", async () => {
        const m = await h.pickSpeculative();
        const s = fenceShard("seq");
        assertOk(await fencedCreate(h, m.id, s, 1, 5), "(1,5)");
        assertCode(await fencedCreate(h, m.id, s, 1, 5), Code.FAILED_PRECONDITION, "(1,5) replay");
        assertCode(await fencedCreate(h, m.id, s, 1, 4), Code.FAILED_PRECONDITION, "(1,4)");
      }),
  },
  {
    id: "baseline FencingPerMachineIsolation",
    title: "marks are per (shard, machine); epoch 0 is a real, stale token",
    run: (h) =>
      withBudget(30_000, "FencingPerMachineIsolation", async () => {
        const l = await h.list({ states: [St.SPECULATIVE], max_results: 2 });
        const ids = [...new Set(l.machines.map((m) => m.id))];
        assert.ok(ids.length >= 2, `need 2 Speculative machines, got ${ids.length}`);
        const [a, b] = ids;
        const s = fenceShard("isolation");
        assertOk(await fencedCreate(h, a, s, 1, 30), "A (1,30)");
        assertOk(await fencedCreate(h, b, s, 1, 7), "B (1,7) lower seq on another machine");
        assertCode(await fencedCreate(h, b, s, 1, 7), Code.FAILED_PRECONDITION, "B (1,7) replay");
        assertCode(await fencedCreate(h, a, s, 1, 30), Code.FAILED_PRECONDITION, "A (1,30) replay");
        assertCode(await fencedCreate(h, b, s, 0, 999), Code.FAILED_PRECONDITION, "B (0,999)");
      }),
  },
  {
    id: "baseline FencingNewEpochResetsSequence",
    title: "(1,1000) OK then (2,1) OK on the same machine",
    run: (h) =>
      withBudget(30_000, "FencingNewEpochResetsSequence", async () => {
        const m = await h.pickSpeculative();
        const s = fenceShard("newepoch");
        assertOk(await fencedCreate(h, m.id, s, 1, 1000), "(1,1000)");
        assertOk(await fencedCreate(h, m.id, s, 2, 1), "(2,1)");
      }),
  },
  {
    id: "baseline FencingReadsUnaffected",
    title: "Get and List still work after a fenced rejection",
    run: (h) =>
      withBudget(30_000, "FencingReadsUnaffected", async () => {
        const m = await h.pickSpeculative();
        const s = fenceShard("reads");
        assertOk(await fencedCreate(h, m.id, s, 9, 9), "(9,9)");
        assertCode(await fencedCreate(h, m.id, s, 1, 1), Code.FAILED_PRECONDITION, "(1,1)");
        assertOk(await outcome(h.get(m.id)), "Get");
        assertOk(await outcome(h.list()), "List");
      }),
  },
  // ---- metadata_test.go
  {
    id: "baseline MetadataEchoedOnGetAndList",
    title: "shard_metadata (with a NUL byte) is echoed by Get and List",
    run: (h) =>
      withBudget(30_000, "MetadataEchoedOnGetAndList", async () => {
        const md = {
          "bigfleet.lucy.sh/assigned-priority": "900000",
          "bigfleet.lucy.sh/assigned-group": "topology.bigfleet/rack\x00gang-7",
          "x-conformance/opaque": "echo-me",
        };
        const { id } = await toConfigured(h, "conformance-md", md, "# conformance metadata\n");
        const g = await h.get(id);
        assert.equal(g.cluster, "conformance-md");
        assertMapEqual(g.shard_metadata, md, "Get");
        const l = await h.list({ states: [St.CONFIGURED] });
        const lm = l.machines.find((m) => m.id === id);
        assert.ok(lm, "machine missing from List(CONFIGURED)");
        assert.equal(lm.cluster, "conformance-md");
        assertMapEqual(lm.shard_metadata, md, "List(CONFIGURED)");
      }),
  },
  {
    id: "baseline MetadataAndBindingClearOnDrain",
    title: "Drain to IDLE clears cluster and shard_metadata",
    run: (h) =>
      withBudget(60_000, "MetadataAndBindingClearOnDrain", async () => {
        const { id } = await toConfigured(h, "conformance-md-drain", {
          "bigfleet.lucy.sh/assigned-priority": "1000000",
        }, "# conformance metadata\n");
        assertOk(await outcome(h.drain(id, 5)), "Drain(5)");
        await reach(h, id, St.IDLE, 30_000);
        const g = await h.get(id);
        assert.equal(g.cluster, "");
        assertMapEqual(g.shard_metadata, {}, "after Drain");
      }),
  },
  {
    id: "baseline MetadataUnknownKeysPreservedVerbatim",
    title: "unknown keys and empty values are preserved verbatim",
    run: (h) =>
      withBudget(30_000, "MetadataUnknownKeysPreservedVerbatim", async () => {
        const md = {
          "x-conformance/definitely-unknown": "Ελληνικά  κείμενο\t|0xDEADBEEF",
          "x-conformance/empty-value": "",
        };
        const { id } = await toConfigured(
          h,
          "conformance-md-unknown",
          md,
          "# conformance metadata\n",
        );
        assertMapEqual((await h.get(id)).shard_metadata, md, "Get");
      }),
  },
];
