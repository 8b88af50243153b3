// The metrics facade (src/server/metrics.ts) loads the Prometheus exposition
// only when asked (the provider asks once its gRPC port is open): everything
// recorded before must show in it, exactly as if it had been there from the
// start.

import assert from "node:assert/strict";
import { createMetrics } from "../../src/server/metrics.ts";
import { State } from "../../src/kit/model.ts";
import { machine } from "../unit/kv_fixtures.ts";
import { parseMetrics, sample } from "./helpers.ts";

const P = "bigfleet_proxmox_";

Deno.test("metrics: what is recorded before the exposition loads shows in its first scrape", async () => {
  const m = createMetrics();
  m.apiCall("CloneVM", "ok", 0.2);
  m.apiCall("CloneVM", "error", 3);
  m.apiCall("CloneVM", "ok", 0.4);
  m.panic();
  m.reconcile("error");
  m.leakedVolume();
  m.recovery("adopt", "refused");
  m.grpcRequest("Create", "OK", 0.001);
  const a = machine("a", { state: State.Speculative, zone: "z-a" });
  const b = machine("b", { state: State.Speculative, zone: "z-a" });
  m.fleet.machineChanged!(undefined, a);
  m.fleet.machineChanged!(undefined, b);
  m.fleet.machineChanged!(a, { ...a, state: State.Creating });
  m.transitionTimeouts({ create: 480_000, configure: 480_000, drain: 900_000, delete: 300_000 });
  m.fleet.transition!({
    kind: "create",
    phase: "started",
    machine: { ...a, state: State.Creating },
    operationId: "op-1",
    ms: 0,
    oldestRunning: 1_700_000_000_000,
  });
  m.watchFailed(() => ({ withHost: 2, withoutHost: 1 }));

  const s = parseMetrics((await m.scrape()).body);
  assert.equal(sample(s, `${P}api_calls_total`, { op: "CloneVM", outcome: "ok" }), 2);
  assert.equal(sample(s, `${P}api_calls_total`, { op: "CloneVM", outcome: "error" }), 1);
  assert.equal(sample(s, `${P}api_duration_seconds_count`, { op: "CloneVM" }), 3);
  assert.equal(sample(s, `${P}panics_total`), 1);
  assert.equal(sample(s, `${P}reconcile_total`, { outcome: "error" }), 1);
  assert.equal(sample(s, `${P}leaked_volumes_total`), 1);
  assert.equal(sample(s, `${P}recoveries_total`, { action: "adopt", outcome: "refused" }), 1);
  assert.equal(sample(s, `${P}grpc_requests_total`, { method: "Create", code: "OK" }), 1);
  assert.equal(sample(s, `${P}machines`, { state: "SPECULATIVE", zone: "z-a" }), 1);
  assert.equal(sample(s, `${P}machines`, { state: "CREATING", zone: "z-a" }), 1);
  assert.equal(sample(s, `${P}transition_timeout_seconds`, { state: "CREATING" }), 480);
  assert.equal(
    sample(s, `${P}transition_oldest_start_seconds`, { state: "CREATING" }),
    1_700_000_000,
  );
  assert.equal(sample(s, `${P}failed_machines`, { host: "known" }), 2);

  // Loaded: later calls go straight in.
  m.apiCall("CloneVM", "ok", 0.1);
  const t = parseMetrics((await m.scrape()).body);
  assert.equal(sample(t, `${P}api_calls_total`, { op: "CloneVM", outcome: "ok" }), 3);
});
