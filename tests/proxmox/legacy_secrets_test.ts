// Legacy PVE (no JSON `message`) in both trust modes, and a sweep of every
// log line and error text for the token secret and the bootstrap blob.

import assert from "node:assert/strict";
import { BackendError } from "../../src/kit/backend.ts";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import { startSimulator } from "../pvesim/mod.ts";
import { configFor, FAST, logLines, rig, signal, slot, vmidOf } from "./helpers.ts";

for (const mode of ["ca", "fingerprint"] as const) {
  Deno.test(`legacy errors (${mode}): lifecycle, gone-detection, races and agent waits still work`, async () => {
    await using r = await rig(
      { legacyErrors: true, timing: { agentBootMs: 300 } },
      (sim) => mode === "ca" ? {} : { caPem: null, fingerprint: sim.fingerprint },
    );
    r.sim.faults.nextidRace = 1;
    r.sim.faults.nextidRaceKind = "sync";
    r.sim.faults.agentTimeouts = 2;
    const s = slot("pve2");
    const { hostRef } = await r.backend.create(s, signal());
    const m = { machineId: s.machineId, hostRef };
    await r.backend.configure(m, { clusterId: "c", bootstrap: new Uint8Array(5) }, signal());
    await r.backend.delete(m, signal());
    assert.equal(r.sim.vm(vmidOf(hostRef)), undefined);
    await r.backend.delete(m, signal()); // already gone: still success
    r.sim.faults.forbidden = /\/clone$/;
    const err = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
    assert.ok(err instanceof BackendError);
    // Every transport reads the reason phrase: the full text even on legacy servers.
    assert.match(err.message, /403 Permission check failed \(\/vms\/9000, VM\.Clone\)/);
  });
}

Deno.test("legacy errors: a VM found on another node than its host ref is still deleted", async () => {
  await using r = await rig({ legacyErrors: true });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  // As if it had migrated: pve2 answers a bare 500, the listing shows it on pve1.
  const stale = hostRef.replace("pve1/", "pve2/");
  await r.backend.delete({ machineId: s.machineId, hostRef: stale }, signal());
  assert.equal(r.sim.vm(vmidOf(hostRef)), undefined);
});

Deno.test("no log line or error text ever carries the token secret or the blob", async () => {
  const secret = "tok-" + crypto.randomUUID();
  const blobText = "BLOB-" + crypto.randomUUID();
  const blob = new TextEncoder().encode(`#!/bin/sh\n# ${blobText}\n`.repeat(3000));
  const errors: string[] = [];
  const collect = (p: Promise<unknown>) =>
    p.catch((e) => errors.push(`${e?.name}: ${e?.message}\n${e?.stack}`));
  const sim = await startSimulator({
    tokenSecret: secret,
    timing: { cloneMs: 80, cloneNamelessMs: 20, taskMs: 10, agentBootMs: 40, execMs: 10 },
  });
  try {
    for (const fp of [null, sim.fingerprint]) {
      const cfg = {
        ...(await import("./helpers.ts")).configFor(
          sim,
          fp ? { caPem: null, fingerprint: fp } : {},
        ),
      };
      const b = await createProxmoxBackend(cfg, { timing: { ...FAST, agentTimeoutMs: 300 } });
      const s = slot("pve1");
      const { hostRef } = await b.create(s, signal());
      const m = { machineId: s.machineId, hostRef };
      await b.configure(m, { clusterId: "c", bootstrap: blob }, signal());
      sim.faults.bootstrapExitCode = 2;
      sim.faults.bootstrapStderr = "failed\n";
      await collect(b.configure(m, { clusterId: "c", bootstrap: blob }, signal()));
      sim.faults.bootstrapExitCode = 0;
      sim.faults.http596.push({ path: /\/agent\/exec$/, count: 1 });
      await collect(b.configure(m, { clusterId: "c", bootstrap: blob }, signal()));
      sim.faults.http596.push({ path: /file-write$/, count: 5 });
      await collect(b.configure(m, { clusterId: "c", bootstrap: blob }, signal()));
      sim.faults.agentDown = true;
      sim.stopVmOutOfBand(vmidOf(hostRef));
      await collect(b.configure(m, { clusterId: "c", bootstrap: blob }, signal()));
      sim.faults.agentDown = false;
      sim.faults.unauthorized = true;
      await collect(b.describe(signal()));
      sim.faults.unauthorized = false;
      sim.faults.forbidden = true;
      await collect(b.create(slot("pve2"), signal()));
      sim.faults.forbidden = false;
      await b.drain(m, 5n, signal());
      await b.delete(m, signal());
      await b.close();
    }
    const wrong = configFor(sim, { caPem: sim.wrongCaPem });
    await collect(createProxmoxBackend(wrong, { timing: FAST }));
  } finally {
    await sim.close();
  }
  assert.ok(errors.length >= 10, `collected ${errors.length} errors`);
  assert.ok(logLines.length > 20, `captured ${logLines.length} log lines`);
  for (const text of [...errors, ...logLines]) {
    assert.ok(!text.includes(secret), `secret leaked: ${text.slice(0, 200)}`);
    assert.ok(!text.includes(blobText), `blob leaked: ${text.slice(0, 200)}`);
    assert.ok(!text.includes("PVEAPIToken"), `auth header leaked: ${text.slice(0, 200)}`);
  }
});
