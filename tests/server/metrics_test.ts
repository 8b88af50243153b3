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
    const lines = logLines(proc.stderr());
    const start = lines.find((l) => l.message === "serving CapacityProvider");
    assert.ok(start, "startup line");
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
