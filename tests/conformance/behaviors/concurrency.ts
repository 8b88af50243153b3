// Concurrency & idempotency, B401–B409 (burst width 16).

import assert from "node:assert/strict";
import {
  assertCode,
  assertMapEqual,
  assertNotFp,
  assertOk,
  Code,
  FAN_N,
  MachineState as St,
  outcome,
  STABLE_STATES,
  stateName,
  token,
  uniqueShardId,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";
import { burst, listedOnce, oneOpId } from "./common.ts";

export const concurrency: Behavior[] = [
  {
    id: "B401",
    title: "16 parallel Creates share one op id and the machine is IDLE once",
    async run(h) {
      const m = await h.pickSpeculative();
      const rs = await burst(FAN_N, () => outcome(h.create(m.id)));
      oneOpId(rs, "16 Creates");
      await h.mustReach(m.id, St.IDLE);
      await listedOnce(h, m.id, St.IDLE, "List(IDLE)");
    },
  },
  {
    id: "B402",
    title: "16 parallel identical Configures share one op id; binding as sent",
    async run(h) {
      const w = await h.walkToIdle();
      const md = { shard: "b402", role: "primary" };
      const rs = await burst(FAN_N, () => outcome(h.configure(w.id, "b402-cluster", md)));
      oneOpId(rs, "16 Configures");
      const g = await h.mustReach(w.id, St.CONFIGURED);
      await listedOnce(h, w.id, St.CONFIGURED, "List(CONFIGURED)");
      assert.equal(g.cluster, "b402-cluster");
      assertMapEqual(g.shard_metadata, md, "metadata");
    },
  },
  {
    id: "B403",
    title: "16 parallel Drains share one op id; binding cleared",
    async run(h) {
      const w = await h.walkToConfigured("b403-cluster", { k: "v" });
      const rs = await burst(FAN_N, () => outcome(h.drain(w.id, 0)));
      oneOpId(rs, "16 Drains");
      const g = await h.mustReach(w.id, St.IDLE);
      await listedOnce(h, w.id, St.IDLE, "List(IDLE)");
      assert.equal(g.cluster, "");
      assertMapEqual(g.shard_metadata, {}, "metadata after Drain");
    },
  },
  {
    id: "B404",
    title: "Configure racing Drain settles in IDLE or CONFIGURED with a consistent binding",
    async run(h) {
      const w = await h.walkToConfigured("b404-cluster", { k: "v" });
      const [c, d] = await Promise.all([
        outcome(h.configure(w.id, "b404-cluster", { k: "v" })),
        outcome(h.drain(w.id, 0)),
      ]);
      assertNotFp(c, "racing Configure");
      assertNotFp(d, "racing Drain");
      // waitStable: 20 ms polls for up to 15 s.
      const end = Date.now() + 15_000;
      let g = await h.get(w.id);
      while (!STABLE_STATES.includes(g.state) && g.state !== St.FAILED && Date.now() < end) {
        await new Promise((r) => setTimeout(r, 20));
        g = await h.get(w.id);
      }
      assert.ok(
        g.state === St.IDLE || g.state === St.CONFIGURED,
        `settled in ${stateName(g.state)}, want IDLE or CONFIGURED`,
      );
      await h.staysIn(w.id, g.state, 300);
      g = await h.get(w.id);
      assert.equal(
        g.cluster,
        g.state === St.IDLE ? "" : "b404-cluster",
        "binding for the settled state",
      );
    },
  },
  {
    id: "B405",
    title: "24 parallel Creates: all 12 zombie tokens fenced, a live one accepted",
    async run(h) {
      const m = await h.pickSpeculative();
      const s = uniqueShardId("b405");
      assertOk(await outcome(h.create(m.id, token(s, 1, 1000))), "(1,1000)");
      await h.mustReach(m.id, St.IDLE);
      const calls = [
        ...Array.from({ length: 12 }, (_, i) => ({ zombie: true, t: token(s, 1, i) })),
        ...Array.from({ length: 12 }, (_, i) => ({ zombie: false, t: token(s, 2, 100 + i) })),
      ];
      const rs = await Promise.all(calls.map((c) => outcome(h.create(m.id, c.t))));
      let liveOk = 0;
      rs.forEach((r, i) => {
        const { zombie, t } = calls[i];
        const what = `(${t.epoch},${t.seq})`;
        if (zombie) assertCode(r, Code.FAILED_PRECONDITION, `zombie ${what}`);
        else if (r.ok) liveOk++;
        else assertCode(r, Code.FAILED_PRECONDITION, `live ${what}`);
      });
      assert.ok(liveOk >= 1, "no live-epoch token was accepted");
      assertCode(await outcome(h.create(m.id, token(s, 1, 9))), Code.FAILED_PRECONDITION, "(1,9)");
      assertOk(await outcome(h.create(m.id, token(s, 2, 9999))), "(2,9999)");
    },
  },
  {
    id: "B406",
    title: "16 Configures over two connections share one op id",
    async run(h) {
      const c1 = h.dial();
      const c2 = h.dial();
      const w = await h.walkToIdle();
      const req = { machine_id: w.id, cluster_id: "b406-cluster", shard_metadata: { k: "v" } };
      const rs = await burst(FAN_N, (i) => outcome((i % 2 === 0 ? c1 : c2).configure(req)));
      oneOpId(rs, "16 Configures on two connections");
      await h.mustReach(w.id, St.CONFIGURED);
      await listedOnce(h, w.id, St.CONFIGURED, "List(CONFIGURED)");
      const a = assertOk(await outcome(c1.configure(req)), "Configure on connection 1");
      const b = assertOk(await outcome(c2.configure(req)), "Configure on connection 2");
      assert.notEqual(a.operation_id, "");
      assert.equal(a.operation_id, b.operation_id, "op ids differ between connections");
    },
  },
  {
    id: "B407",
    title: "8 parallel Creates on distinct machines: all OK with distinct op ids",
    async run(h) {
      const ms = await h.pickNSpeculative(8);
      const rs = await Promise.all(ms.map((m) => outcome(h.create(m.id))));
      const ops = rs.map((r, i) => assertOk(r, `Create ${ms[i].id}`).operation_id);
      for (const op of ops) assert.notEqual(op, "", "empty operation_id");
      assert.equal(new Set(ops).size, 8, `op ids not distinct: ${ops.join(", ")}`);
      for (const m of ms) {
        const g = await h.mustReach(m.id, St.IDLE, 30_000);
        assert.equal(g.cluster, "", `${m.id}: cluster`);
        assertMapEqual(g.shard_metadata, {}, `${m.id}: metadata`);
      }
    },
  },
  {
    id: "B408",
    title: "burst Configure acks carry a CONFIGURING/CONFIGURED snapshot",
    async run(h) {
      const w = await h.walkToIdle();
      const rs = await burst(FAN_N, () => outcome(h.configure(w.id, "b408-cluster", { k: "v" })));
      oneOpId(rs, "16 Configures");
      for (const r of rs) {
        if (!r.ok || r.value.machine == null) continue; // a missing snapshot is tolerated
        const s = r.value.machine;
        assert.ok(
          s.state === St.CONFIGURING || s.state === St.CONFIGURED,
          `ack snapshot state ${stateName(s.state)}`,
        );
        if (s.state === St.CONFIGURED) {
          assert.equal(s.cluster, "b408-cluster", "CONFIGURED snapshot cluster");
        }
      }
      await h.mustReach(w.id, St.CONFIGURED);
      await listedOnce(h, w.id, St.CONFIGURED, "List(CONFIGURED)");
    },
  },
  {
    id: "B409",
    title: "16 parallel Deletes share one op id; SPECULATIVE once",
    async run(h) {
      await h.requireCapabilities({ delete: true });
      const w = await h.walkToIdle();
      const rs = await burst(FAN_N, () => outcome(h.delete(w.id)));
      oneOpId(rs, "16 Deletes");
      await h.mustReach(w.id, St.SPECULATIVE);
      await listedOnce(h, w.id, St.SPECULATIVE, "List(SPECULATIVE)");
    },
  },
];
