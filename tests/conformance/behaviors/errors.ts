// Transition matrix and errors, B201–B215.

import assert from "node:assert/strict";
import {
  assertCode,
  assertCodeIn,
  assertMapEqual,
  assertNonFpRejection,
  assertNotFp,
  assertOk,
  assertState,
  Code,
  codeName,
  ERR_STABILITY_MS,
  type Harness,
  MachineState as St,
  opIdOf,
  outcome,
  token,
  uniqueShardId,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";

const MAX = (1n << 63n) - 1n;
let ghostCounter = 0;

function ghostId(): string {
  return `conformance-b207-ghost-conf-id-${BigInt(Date.now()) * 1_000_000n}-${++ghostCounter}`;
}

/** State unchanged: checked at once, then over 250 ms. */
async function unchanged(h: Harness, id: string, state: number, what: string) {
  assertState(await h.get(id), state, what);
  return await h.staysIn(id, state, ERR_STABILITY_MS);
}

export const errors: Behavior[] = [
  {
    id: "B201",
    title: "Create on CONFIGURED is a non-FP rejection and changes nothing",
    async run(h) {
      const w = await h.walkToConfigured("conf-b201", { k: "v" });
      assertNonFpRejection(await outcome(h.create(w.id)), "Create on CONFIGURED");
      const g = await unchanged(h, w.id, St.CONFIGURED, "after Create");
      assert.equal(g.cluster, "conf-b201");
    },
  },
  {
    id: "B202",
    title: "Configure on SPECULATIVE is a non-FP rejection and binds nothing",
    async run(h) {
      const m = await h.pickSpeculative();
      assertNonFpRejection(
        await outcome(h.configure(m.id, "conf-b202", { k: "v" })),
        "Configure on SPECULATIVE",
      );
      const g = await unchanged(h, m.id, St.SPECULATIVE, "after Configure");
      assert.equal(g.cluster, "");
      assertMapEqual(g.shard_metadata, {}, "metadata");
    },
  },
  {
    id: "B203",
    title: "Drain on IDLE is OK or non-FP, and the machine stays IDLE",
    async run(h) {
      const w = await h.walkToIdle();
      assertNotFp(await outcome(h.drain(w.id, 5)), "Drain on IDLE");
      await h.staysIn(w.id, St.IDLE, ERR_STABILITY_MS);
    },
  },
  {
    id: "B204",
    title: "Delete on SPECULATIVE changes nothing; Delete on CONFIGURED is rejected",
    async run(h) {
      const m = await h.pickSpeculative();
      assertNotFp(await outcome(h.delete(m.id)), "Delete on SPECULATIVE");
      await unchanged(h, m.id, St.SPECULATIVE, "after Delete on SPECULATIVE");
      const w = await h.walkToConfigured("conf-b204");
      assertNonFpRejection(await outcome(h.delete(w.id)), "Delete on CONFIGURED");
      await unchanged(h, w.id, St.CONFIGURED, "after Delete on CONFIGURED");
    },
  },
  {
    id: "B205",
    title: "at-target Configure/Create are OK no-ops; the ack carries the current snapshot",
    async run(h) {
      const md = { a: "1", b: "2" };
      const w = await h.walkToConfigured("conf-b205", md);
      const ack = assertOk(
        await outcome(h.configure(w.id, "conf-b205", md)),
        "identical Configure",
      );
      assert.ok(ack.machine, "ack.machine missing");
      assertState(ack.machine, St.CONFIGURED, "ack.machine");
      assertState(await h.get(w.id), St.CONFIGURED, "after Configure");
      await h.neverReaches(w.id, [St.CONFIGURING, St.DRAINING], ERR_STABILITY_MS);

      const i = await h.walkToIdle();
      assertOk(await outcome(h.create(i.id)), "Create on IDLE");
      assertState(await h.get(i.id), St.IDLE, "after Create");
      await h.neverReaches(i.id, [St.CREATING], ERR_STABILITY_MS);
    },
  },
  {
    id: "B206",
    title: "op ids: a repeat returns the old id, a new kind mints a new one",
    async run(h) {
      const m = await h.pickSpeculative();
      const x = opIdOf(await outcome(h.create(m.id)), "Create");
      await h.mustReach(m.id, St.IDLE);
      assert.equal(opIdOf(await outcome(h.create(m.id)), "Create again"), x);
      const y = opIdOf(await outcome(h.configure(m.id, "conf-b206", { k: "v" })), "Configure");
      assert.notEqual(y, x, "Configure reused the Create op id");
      await h.mustReach(m.id, St.CONFIGURED);
      assert.equal(
        opIdOf(await outcome(h.configure(m.id, "conf-b206", { k: "v" })), "Configure again"),
        y,
      );
    },
  },
  {
    id: "B207",
    title: "lifecycle calls on an unknown id are NOT_FOUND and create nothing",
    async run(h) {
      const id = ghostId();
      assertCode(await outcome(h.create(id)), Code.NOT_FOUND, "Create");
      assertCode(await outcome(h.configure(id, "x", { k: "v" })), Code.NOT_FOUND, "Configure");
      assertCode(await outcome(h.drain(id, 5)), Code.NOT_FOUND, "Drain");
      assertCode(await outcome(h.get(id)), Code.NOT_FOUND, "Get afterwards");
    },
  },
  {
    id: "B208",
    title: "an empty id is INVALID_ARGUMENT",
    async run(h) {
      assertCode(await outcome(h.get("")), Code.INVALID_ARGUMENT, 'Get("")');
      assertCode(await outcome(h.create("")), Code.INVALID_ARGUMENT, 'Create("")');
      assertCode(await outcome(h.configure("", "x")), Code.INVALID_ARGUMENT, 'Configure("")');
      assertCode(await outcome(h.drain("", 5)), Code.INVALID_ARGUMENT, 'Drain("")');
    },
  },
  {
    id: "B209",
    title: "a 512-key × 1 KiB map is stored exactly or refused with INVALID_ARGUMENT",
    async run(h) {
      const w = await h.walkToIdle();
      const md: Record<string, string> = {};
      for (let i = 0; i < 512; i++) md[`b209-key-${String(i).padStart(3, "0")}`] = "v".repeat(1024);
      const r = await outcome(h.configure(w.id, "conf-b209", md));
      if (r.ok) {
        await h.mustReach(w.id, St.CONFIGURED, 20_000);
        assertMapEqual((await h.get(w.id)).shard_metadata, md, "Get");
        return;
      }
      assertCode(r, Code.INVALID_ARGUMENT, "large Configure");
      const g = await h.staysIn(w.id, St.IDLE, ERR_STABILITY_MS);
      assert.equal(g.cluster, "");
      assertMapEqual(g.shard_metadata, {}, "metadata after refusal");
    },
  },
  {
    id: "B210",
    title: "Drain with grace −5 is INVALID_ARGUMENT (stays) or OK (drains)",
    async run(h) {
      const w = await h.walkToConfigured("conf-b210", { k: "v" });
      const r = await outcome(h.drain(w.id, -5));
      if (r.ok) {
        const g = await h.mustReach(w.id, St.IDLE, 20_000);
        assert.equal(g.cluster, "");
        return;
      }
      assertCode(r, Code.INVALID_ARGUMENT, "Drain(-5)");
      await h.staysIn(w.id, St.CONFIGURED, ERR_STABILITY_MS);
    },
  },
  {
    id: "B211",
    title: "negative first-contact tokens are OK (or INVALID_ARGUMENT), never FP",
    async run(h) {
      for (const [e, s] of [[-1, 1], [1, -1], [-7, -3]]) {
        const m = await h.pickSpeculative();
        const r = await outcome(h.create(m.id, token(uniqueShardId("b211"), e, s)));
        if (r.ok) {
          await h.mustReach(m.id, St.IDLE);
          continue;
        }
        assertCode(r, Code.INVALID_ARGUMENT, `Create (${e},${s})`);
        await h.staysIn(m.id, St.SPECULATIVE, ERR_STABILITY_MS);
      }
    },
  },
  {
    id: "B212",
    title: "int64 max tokens compare exactly",
    async run(h) {
      const w = await h.walkToIdle();
      const s = uniqueShardId("b212");
      assertOk(await h.fenced("configure", w.id, token(s, MAX, MAX)), "Configure (max,max)");
      const g = await h.mustReach(w.id, St.CONFIGURED, 20_000);
      assertCode(
        await h.fenced("create", w.id, token(s, MAX, MAX)),
        Code.FAILED_PRECONDITION,
        "(max,max) replay",
      );
      assertCode(
        await h.fenced("create", w.id, token(s, MAX - 1n, MAX)),
        Code.FAILED_PRECONDITION,
        "(max-1,max)",
      );
      assert.equal(g.cluster, "conf-cluster");
    },
  },
  {
    id: "B213",
    title: "a 3 MiB bootstrap blob is accepted or refused cleanly",
    async run(h) {
      const w = await h.walkToIdle();
      const blob = new Uint8Array(3 * 1024 * 1024);
      for (let i = 0; i < blob.length; i++) blob[i] = 97 + (i % 26);
      const r = await outcome(h.configure(w.id, "conf-b213", { k: "v" }, undefined, blob));
      if (r.ok) {
        const g = await h.mustReach(w.id, St.CONFIGURED, 20_000);
        assert.equal(g.cluster, "conf-b213");
        return;
      }
      assertCodeIn(r, [Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED], "3 MiB Configure");
      const g = await h.staysIn(w.id, St.IDLE, ERR_STABILITY_MS);
      assert.equal(g.cluster, "");
    },
  },
  {
    id: "B214",
    title: "five lifecycle steps mint five op ids; the last Drain replays its id",
    async run(h) {
      const m = await h.pickSpeculative();
      const ops: string[] = [];
      ops.push(opIdOf(await outcome(h.create(m.id)), "Create"));
      await h.mustReach(m.id, St.IDLE);
      ops.push(opIdOf(await outcome(h.configure(m.id, "conf-b214", { k: "1" })), "Configure #1"));
      await h.mustReach(m.id, St.CONFIGURED);
      ops.push(opIdOf(await outcome(h.drain(m.id, 5)), "Drain #1"));
      await h.mustReach(m.id, St.IDLE);
      ops.push(opIdOf(await outcome(h.configure(m.id, "conf-b214-b", { k: "2" })), "Configure #2"));
      await h.mustReach(m.id, St.CONFIGURED);
      ops.push(opIdOf(await outcome(h.drain(m.id, 5)), "Drain #2"));
      await h.mustReach(m.id, St.IDLE);
      assert.equal(new Set(ops).size, 5, `op ids not all different: ${ops.join(", ")}`);
      const again = await outcome(h.drain(m.id, 5));
      assert.equal(
        opIdOf(again, "Drain replay on IDLE"),
        ops[4],
        "replayed Drain must return the last Drain's op id",
      );
    },
  },
  {
    id: "B215",
    title: "Get unknown is NOT_FOUND; Delete unknown NOT_FOUND or UNIMPLEMENTED",
    async run(h) {
      assertCode(await outcome(h.get("conformance-b215-unknown")), Code.NOT_FOUND, "Get unknown");
      const d = await outcome(h.delete("conformance-b215-unknown"));
      assertCodeIn(d, [Code.NOT_FOUND, Code.UNIMPLEMENTED], `Delete unknown (${codeName(d.code)})`);
    },
  },
];
