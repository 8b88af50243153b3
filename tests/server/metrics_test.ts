// /metrics of a real provider process after real RPCs: every family with the
// label sets it promises, gRPC code names, process metrics, the content type,
// and the per-RPC and startup log lines.

import assert from "node:assert/strict";
import { Harness, MachineState, outcome } from "../harness/mod.ts";
import { API_OPS } from "../../src/server/metrics.ts";
import { createFakeBackend } from "../../src/fake/backend.ts";
import type { Backend } from "../../src/kit/backend.ts";
import {
  httpGet,
  logLines,
  parseMetrics,
  sample,
  scrape,
  startTestApp,
  startWithMetrics,
  waitFor,
  waitForServing,
} from "./helpers.ts";

const P = "bigfleet_proxmox_";

Deno.test("metrics: every family and label set after real RPCs", async () => {
  const proc = await startWithMetrics(
    ["--seed-count=8", "--reconcile-interval=50ms", "--provider=metrics"],
    { env: { BIGFLEET_LOG_LEVEL: "debug" } },
  );
  const h = new Harness(proc.addr);
  try {
    // A full lifecycle, then errors of three kinds.
    const w = await h.walkToIdle();
    await h.configure(w.id, "c1");
    await h.mustReach(w.id, MachineState.CONFIGURED);
    await h.drain(w.id, 0);
    await h.mustReach(w.id, MachineState.IDLE);
    await h.delete(w.id);
    await h.list();
    const missing = await outcome(h.get("no/such/machine"));
    assert.equal(missing.code, 5);
    const shard = h.session("metrics");
    const other = await h.pickSpeculative();
    shard.seq = 10n;
    assert.equal((await shard.create(other.id)).code, 0);
    shard.seq = 3n;
    assert.equal((await shard.create(other.id)).code, 9, "older token is fenced");

    const res = await httpGet(proc.metricsPort, "/metrics");
    assert.equal(res.status, 200);
    assert.match(res.contentType, /^text\/plain; version=0\.0\.4/);
    // Wait for at least one reconcile pass to be counted.
    const s = await waitFor("a reconcile pass", async () => {
      const s = await scrape(proc.metricsPort);
      return sample(s, `${P}reconcile_total`, { outcome: "ok" }) > 0 ? s : undefined;
    });

    const req = (method: string, code: string) =>
      sample(s, `${P}grpc_requests_total`, { method, code });
    for (const m of ["Create", "Configure", "Drain", "Delete", "List"]) {
      assert.ok(req(m, "OK") >= 1, `${m} OK counted`);
      assert.ok(
        sample(s, `${P}grpc_request_duration_seconds_count`, { method: m }) >= 1,
        `${m} duration observed`,
      );
      assert.ok(
        sample(s, `${P}grpc_request_duration_seconds_bucket`, { method: m, le: "+Inf" }) >= 1,
      );
    }
    assert.ok(req("Get", "OK") >= 1);
    assert.equal(req("Get", "NOT_FOUND"), 1);
    assert.equal(req("Create", "FAILED_PRECONDITION"), 1);
    assert.equal(sample(s, `${P}panics_total`), 0);
    assert.equal(sample(s, `${P}reconcile_total`, { outcome: "error" }), 0);
    // The fake backend makes no Proxmox calls; every op series exists at zero.
    for (const op of API_OPS) {
      for (const outcome of ["ok", "error"]) {
        assert.equal(sample(s, `${P}api_calls_total`, { op, outcome }), 0);
      }
      assert.equal(sample(s, `${P}api_duration_seconds_count`, { op }), 0);
    }
    // Process metrics really measure this process under Deno.
    assert.ok(sample(s, "process_resident_memory_bytes") > 1e6);
    assert.ok(sample(s, "process_cpu_seconds_total") > 0);
    assert.ok(sample(s, "process_start_time_seconds") > 1.6e9);
    assert.ok(sample(s, "nodejs_heap_size_used_bytes") > 0);

    // Logs: startup line, INFO lifecycle, DEBUG reads, WARN errors.
    const start = await waitForServing(proc);
    const lines = logLines(proc.stderr());
    assert.equal(start.security, "insecure");
    assert.equal(start.provider, "metrics");
    assert.equal(start.proxmox_backend, "fake");
    assert.equal(start.metrics_addr, `127.0.0.1:${proc.metricsPort}`);
    assert.equal(start.zones, "pve-a,pve-b");
    assert.equal(start.offerings, "built-in");
    const rpc = (method: string, code: string) =>
      lines.find((l) => l.logger === "bigfleet.rpc" && l.method === method && l.code === code);
    assert.equal(rpc("Create", "OK")?.level, "INFO");
    assert.equal(typeof rpc("Create", "OK")?.dur_ms, "number");
    assert.equal(rpc("Configure", "OK")?.level, "INFO");
    assert.equal(rpc("Get", "OK")?.level, "DEBUG");
    assert.equal(rpc("List", "OK")?.level, "DEBUG");
    assert.equal(rpc("Get", "NOT_FOUND")?.level, "WARN");
    assert.equal(rpc("Create", "FAILED_PRECONDITION")?.level, "WARN");
    // The bootstrap blob never reaches a log line.
    assert.ok(!proc.stderr().includes("# conformance"));
  } finally {
    h.close();
    await proc.stop();
  }
});

Deno.test("metrics: reads log at DEBUG only, so the default level hides them", async () => {
  const proc = await startWithMetrics(["--seed-count=4"]);
  const h = new Harness(proc.addr);
  try {
    await h.list();
    const w = await h.walkToIdle();
    assert.ok(w.id);
    const lines = logLines(proc.stderr()).filter((l) => l.logger === "bigfleet.rpc");
    assert.ok(lines.some((l) => l.method === "Create" && l.level === "INFO"));
    assert.ok(!lines.some((l) => l.method === "List" || l.method === "Get"));
  } finally {
    h.close();
    await proc.stop();
  }
});

Deno.test("metrics: a failing reconcile pass counts as reconcile_total{outcome=error}", async () => {
  const fake = createFakeBackend({ delayMs: 0 });
  const backend: Backend = {
    ...fake,
    kind: "fake",
    // Reachable for the boot inventory (an empty store lists the substrate), unreachable for
    // every reconcile pass after it, the first of which runs as soon as the provider serves.
    describe: (signal) =>
      described++ > 0 ? Promise.reject(new Error("substrate unreachable")) : fake.describe(signal),
  };
  let described = 0;
  const app = await startTestApp(["--metrics-addr=", "--reconcile-interval=20ms"], { backend });
  try {
    await waitFor("a failed pass", async () => {
      const s = parseMetrics((await app.metrics.scrape()).body);
      return sample(s, `${P}reconcile_total`, { outcome: "error" }) > 0 || undefined;
    });
    const s = parseMetrics((await app.metrics.scrape()).body);
    assert.equal(sample(s, `${P}reconcile_total`, { outcome: "ok" }), 0);
  } finally {
    await app.stop();
  }
});

/** Machines by (state, zone) from a scrape, zero series left out. */
function byStateZone(s: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, v] of s) {
    const m = /^bigfleet_proxmox_machines\{state=(\w+),zone=([^}]+)\}$/.exec(key);
    if (m && v !== 0) out[`${m[1]}/${m[2]}`] = v;
  }
  return out;
}

Deno.test("metrics: machines by state and zone and the oldest running transition follow the fleet, across a restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bf-metrics-" });
  const args = ["--seed-count=8", "--fake-delay=1500ms", `--state=${dir}/state.kv`];
  let proc = await startWithMetrics(args);
  let h = new Harness(proc.addr);
  try {
    let s = await scrape(proc.metricsPort);
    assert.deepEqual(byStateZone(s), { "SPECULATIVE/pve-a": 4, "SPECULATIVE/pve-b": 4 });
    // Every state has its series from boot, so `FAILED > 0` and absent() rules work at once.
    for (const state of ["CREATING", "IDLE", "CONFIGURED", "FAILED"]) {
      assert.equal(sample(s, `${P}machines`, { state, zone: "pve-a" }), 0, state);
    }
    const timeouts = { CREATING: 480, CONFIGURING: 480, DRAINING: 900, DELETING: 300 };
    for (const [state, seconds] of Object.entries(timeouts)) {
      assert.equal(sample(s, `${P}transition_timeout_seconds`, { state }), seconds, state);
      assert.equal(sample(s, `${P}transition_oldest_start_seconds`, { state }), 0, state);
    }

    const all = (await h.list()).machines;
    const [m1, m2] = all.filter((m) => m.zone === "pve-a");
    const before = Date.now() / 1000;
    await h.create(m1.id);
    s = await waitFor("CREATING counted", async () => {
      const s = await scrape(proc.metricsPort);
      return sample(s, `${P}machines`, { state: "CREATING", zone: "pve-a" }) === 1 ? s : undefined;
    });
    assert.deepEqual(byStateZone(s), {
      "SPECULATIVE/pve-a": 3,
      "CREATING/pve-a": 1,
      "SPECULATIVE/pve-b": 4,
    });
    const started = sample(s, `${P}transition_oldest_start_seconds`, { state: "CREATING" });
    assert.ok(started >= before - 1 && started <= Date.now() / 1000 + 1, `started at ${started}`);
    await h.mustReach(m1.id, MachineState.IDLE);
    s = await waitFor("IDLE counted", async () => {
      const s = await scrape(proc.metricsPort);
      return sample(s, `${P}machines`, { state: "IDLE", zone: "pve-a" }) === 1 ? s : undefined;
    });
    assert.deepEqual(byStateZone(s), {
      "SPECULATIVE/pve-a": 3,
      "IDLE/pve-a": 1,
      "SPECULATIVE/pve-b": 4,
    });
    assert.equal(sample(s, `${P}transition_oldest_start_seconds`, { state: "CREATING" }), 0);

    // Killed mid-Create: the restart brings it back FAILED, and the gauge says so.
    await h.create(m2.id);
    await h.mustReach(m2.id, MachineState.CREATING);
    h.close();
    await proc.stop();
    proc = await startWithMetrics(args);
    h = new Harness(proc.addr);
    s = await scrape(proc.metricsPort);
    assert.deepEqual(byStateZone(s), {
      "SPECULATIVE/pve-a": 2,
      "IDLE/pve-a": 1,
      "FAILED/pve-a": 1,
      "SPECULATIVE/pve-b": 4,
    });
    assert.equal((await h.get(m2.id)).state, MachineState.FAILED);
  } finally {
    h.close();
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("logs: each lifecycle call's line names machine, operation, shard, epoch and sequence; each transition logs its start and landing with its duration", async () => {
  const proc = await startWithMetrics(["--seed-count=4", "--fake-delay=100ms"]);
  const h = new Harness(proc.addr);
  try {
    const m = await h.pickSpeculative();
    const shard = h.session("logs");
    shard.epoch = 7n;
    shard.seq = 41n;
    const ack = await shard.create(m.id);
    assert.equal(ack.code, 0);
    const opId = (ack as { value: { operation_id: string } }).value.operation_id;
    await h.mustReach(m.id, MachineState.IDLE);
    const landed = await waitFor(
      "the landing line",
      () =>
        logLines(proc.stderr()).find((l) =>
          l.logger === "bigfleet.kit" &&
          l.message === `create of ${m.id} landed IDLE after ${l.dur_ms} ms`
        ),
    );
    const lines = logLines(proc.stderr());
    const rpc = lines.find((l) => l.logger === "bigfleet.rpc" && l.method === "Create");
    assert.ok(rpc, "the Create line");
    assert.deepEqual(
      [rpc.machineId, rpc.operationId, rpc.shardId, rpc.epoch, rpc.sequence, rpc.code],
      [m.id, opId, shard.shard, "7", "41", "OK"],
    );
    const start = lines.find((l) => l.message === `create of ${m.id} started`);
    assert.ok(start, "the start line");
    assert.deepEqual(
      [
        start.level,
        start.machineId,
        start.operationId,
        start.shardId,
        start.epoch,
        start.sequence,
        start.state,
      ],
      ["INFO", m.id, opId, shard.shard, "7", "41", "CREATING"],
    );
    assert.deepEqual([landed.level, landed.machineId, landed.operationId, landed.state], [
      "INFO",
      m.id,
      opId,
      "IDLE",
    ]);
    assert.ok(Number(landed.dur_ms) >= 100, `dur_ms ${landed.dur_ms}: the fake's delay`);
    // One field name for the machine id in every logger.
    for (const l of lines) {
      for (const k of ["id", "machine_id", "machine"]) assert.ok(!(k in l), `${l.message}: ${k}`);
    }
  } finally {
    h.close();
    await proc.stop();
  }
});
