// Scale lane, B1101–B1109, on a fresh instance: --seed-count=N (BFCONF_SCALE_SEED,
// default 4000 as PR CI) and soak D (BFCONF_SOAK, default 5s), 256 MiB client.

import assert from "node:assert/strict";
import {
  assertMapEqual,
  assertNoDuplicates,
  assertOk,
  CapacityType,
  fakeProviderArgs,
  Harness,
  type Machine,
  MachineState as St,
  MIB,
  outcome,
  type ProviderProcess,
  sleep,
  startProvider,
  stateName,
  TRANSITIONAL_STATES,
} from "../harness/mod.ts";

const N = Number(Deno.env.get("BFCONF_SCALE_SEED") ?? "4000");
const SOAK_MS = parseSoak(Deno.env.get("BFCONF_SOAK") ?? "5s");
// Off by design: one provider process is shared by every test of the lane.
const opts = { sanitizeOps: false, sanitizeResources: false };

/** "5s", "60s", "1m", "500ms" → milliseconds. */
function parseSoak(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(s.trim());
  if (!m) throw new Error(`BFCONF_SOAK: cannot parse ${JSON.stringify(s)}`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] as "ms" | "s" | "m"];
}

let booting: Promise<ProviderProcess> | undefined;

function scaleTest(name: string, fn: (h: Harness) => Promise<void>) {
  Deno.test({
    name: `[scale N=${N}] ${name}`,
    ...opts,
    async fn() {
      booting ??= startProvider({ args: fakeProviderArgs({ seed: N }) });
      const p = await booting;
      const h = new Harness(p.addr, { maxReceiveBytes: 256 * MIB });
      try {
        await fn(h);
      } finally {
        h.close();
      }
    },
  });
}

/** Nearest-rank percentile. */
function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)];
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const v = await fn();
  return [v, performance.now() - t0];
}

function checkRecord(m: Machine) {
  assert.notEqual(m.id, "", "empty id");
  assert.notEqual(m.state, St.UNSPECIFIED, `${m.id}: state UNSPECIFIED`);
  assert.notEqual(m.instance_type, "", `${m.id}: empty instance_type`);
  assert.notEqual(m.zone, "", `${m.id}: empty zone`);
  assert.notEqual(m.capacity_type, CapacityType.UNSPECIFIED, `${m.id}: capacity_type UNSPECIFIED`);
  assert.ok(Number.isFinite(m.price_per_hour) && m.price_per_hour >= 0, `${m.id}: price`);
  const p = m.interruption_probability;
  assert.ok(!Number.isNaN(p) && p >= 0 && p <= 1, `${m.id}: interruption_probability ${p}`);
  if (m.capacity_type === CapacityType.SPOT) assert.ok(p > 0, `${m.id}: SPOT with probability 0`);
}

scaleTest("B1101 a full List returns ≥ N well-formed records", async (h) => {
  const l = await h.list();
  assert.ok(l.machines.length >= N, `${l.machines.length} machines, want ≥ ${N}`);
  for (const m of l.machines) checkRecord(m);
});

scaleTest("B1102 a delta after configuring 20 machines holds exactly those 20", async (h) => {
  const walked = await h.walkNToIdle(20);
  const rev = (await h.list()).revision;
  await Promise.all(walked.map((w) => h.configure(w.id, "scale-b1102", { k: "v" })));
  await Promise.all(walked.map((w) => h.mustReach(w.id, St.CONFIGURED, 30_000)));
  const got = (await h.list({ since_revision: rev })).machines.map((m) => m.id).sort();
  assert.deepEqual(
    got,
    walked.map((w) => w.id).sort(),
    "delta must be exactly the 20 configured machines",
  );
});

scaleTest("B1103 paging with max_results 500 covers the fleet", async (h) => {
  const full = new Set((await h.list()).machines.map((m) => m.id));
  const page0 = await h.list({ max_results: 500 });
  assert.ok(page0.machines.length <= 500, `page0 has ${page0.machines.length}`);
  assertNoDuplicates(page0.machines.map((m) => m.id), "page0");
  for (const m of page0.machines) assert.ok(full.has(m.id), `page0 ${m.id} not in the fleet`);
  const seen = new Set(page0.machines.map((m) => m.id));
  const page1 = await h.list({ max_results: 500, since_revision: page0.revision });
  for (const m of page1.machines) assert.ok(!seen.has(m.id), `page1 repeats ${m.id}`);
  if (page1.machines.length === 0) return; // head-echo: the uncapped List already proved completeness
  let cursor = page0.revision;
  const budget = Math.floor(full.size / 500) + 8;
  for (let p = 0; p < budget && seen.size < full.size; p++) {
    const page = await h.list({ max_results: 500, since_revision: cursor });
    for (const m of page.machines) seen.add(m.id);
    cursor = page.revision;
  }
  assert.equal(
    seen.size,
    full.size,
    `threading covered ${seen.size}/${full.size} in ${budget} pages`,
  );
});

scaleTest("B1104 configure/drain churn on 8 machines returns clean to Idle", async (h) => {
  const ws = await h.walkNToIdle(8);
  const end = Date.now() + SOAK_MS;
  let cycles = 0;
  do {
    await Promise.all(ws.map((w) => h.configure(w.id, "scale-b1104", { cycle: "x" })));
    await Promise.all(ws.map((w) => h.mustReach(w.id, St.CONFIGURED, 30_000)));
    await Promise.all(ws.map((w) => h.drain(w.id, 0)));
    const idle = await Promise.all(ws.map((w) => h.mustReach(w.id, St.IDLE, 30_000)));
    for (const m of idle) {
      assert.equal(m.cluster, "", `${m.id}: cluster at Idle`);
      assertMapEqual(m.shard_metadata, {}, `${m.id}: metadata at Idle`);
      assert.equal(m.last_error, "", `${m.id}: last_error at Idle`);
    }
    cycles++;
  } while (Date.now() < end);
  assert.ok(cycles >= 1);
  console.log(`B1104: ${cycles} cycles of 8 machines in ${SOAK_MS} ms`);
});

scaleTest("B1105 create/delete churn conserves the fleet size", async (h) => {
  const caps = await h.requireCapabilities({ delete: true });
  const before = (await h.list()).machines.length;
  const end = Date.now() + SOAK_MS;
  let rounds = 0;
  do {
    const w = await h.walkToIdle();
    if (caps.delete) {
      assertOk(await outcome(h.delete(w.id)), "Delete");
      await h.mustReach(w.id, St.SPECULATIVE, 30_000);
    }
    rounds++;
  } while (Date.now() < end);
  const after = (await h.list()).machines.length;
  assert.equal(after, before, `fleet size ${before} → ${after} after ${rounds} rounds`);
});

// B1106 and B1107 enforce the certification's latency ceilings, the
// contract's numbers (BigFleet's runner fails a provider over them), with
// nearest-rank p99. They are far above what the provider needs at the lane's
// fleet sizes even on a loaded machine; its own figures are measured in bench/
// (bench/e2e_list.ts, bench/RESULTS.md).
const B1106_GET_P99_MS = 250;
const B1106_CREATE_P99_MS = 250;
const B1106_LIST_P99_MS = 2_000;
const B1107_LIST_MS = 3_000;

scaleTest("B1106 p99 of 120 Gets and 60 Creates ≤ 250 ms, of 120 full Lists ≤ 2 s", async (h) => {
  const one = await h.pickSpeculative();
  const gets: number[] = [];
  for (let i = 0; i < 120; i++) {
    const [g, ms] = await timed(() => h.get(one.id));
    assert.equal(g.id, one.id);
    gets.push(ms);
  }
  const lists: number[] = [];
  for (let i = 0; i < 120; i++) {
    const [l, ms] = await timed(() => h.list());
    assert.ok(l.machines.length >= N, `${l.machines.length} machines`);
    lists.push(ms);
  }
  const creates: number[] = [];
  const targets = await h.pickNSpeculative(60);
  assert.equal(targets.length, 60);
  for (const m of targets) {
    const [ack, ms] = await timed(() => outcome(h.create(m.id)));
    assertOk(ack, `Create ${m.id}`);
    creates.push(ms);
  }
  const [g, l, c] = [percentile(gets, 99), percentile(lists, 99), percentile(creates, 99)];
  console.log(
    `B1106 p99: Get ${g.toFixed(1)} ms, List ${l.toFixed(1)} ms, Create ${c.toFixed(1)} ms`,
  );
  assert.ok(g <= B1106_GET_P99_MS, `Get p99 ${g.toFixed(1)} ms > ${B1106_GET_P99_MS} ms`);
  assert.ok(c <= B1106_CREATE_P99_MS, `Create p99 ${c.toFixed(1)} ms > ${B1106_CREATE_P99_MS} ms`);
  assert.ok(l <= B1106_LIST_P99_MS, `List p99 ${l.toFixed(1)} ms > ${B1106_LIST_P99_MS} ms`);
});

scaleTest("B1107 a warm full List returns ≥ N machines within 3 s", async (h) => {
  await h.list();
  const [l, ms] = await timed(() => h.list());
  console.log(`B1107: full List of ${l.machines.length} in ${ms.toFixed(1)} ms`);
  assert.ok(l.machines.length >= N, `${l.machines.length} machines`);
  assert.ok(ms <= B1107_LIST_MS, `full List took ${ms.toFixed(1)} ms > ${B1107_LIST_MS} ms`);
});

scaleTest("B1108 16 parallel Creates: all OK, distinct op ids, all IDLE", async (h) => {
  const ms = await h.pickNSpeculative(16);
  const [acks, dt] = await timed(() => Promise.all(ms.map((m) => outcome(h.create(m.id)))));
  const ops = acks.map((a, i) => assertOk(a, `Create ${ms[i].id}`).operation_id);
  for (const op of ops) assert.notEqual(op, "", "empty operation_id");
  assert.equal(new Set(ops).size, 16, "op ids not distinct");
  await Promise.all(ms.map((m) => h.mustReach(m.id, St.IDLE, 30_000)));
  console.log(`B1108: 16 Creates acknowledged in ${dt.toFixed(1)} ms`);
});

scaleTest("B1109 Idle machines do not drift during the soak window", async (h) => {
  const ws = await h.walkNToIdle(8);
  const windowMs = Math.min(3000, Math.max(500, SOAK_MS / 4));
  const end = Date.now() + windowMs;
  while (Date.now() < end) {
    for (const w of ws) {
      const g = await h.get(w.id);
      assert.ok(!TRANSITIONAL_STATES.includes(g.state), `${w.id} drifted to ${stateName(g.state)}`);
      assert.notEqual(g.state, St.FAILED, `${w.id} drifted to FAILED`);
    }
    await sleep(20);
  }
});

Deno.test({
  name: `[scale N=${N}] stop the provider`,
  ...opts,
  async fn() {
    const p = await booting?.catch(() => undefined);
    await p?.stop();
  },
});
