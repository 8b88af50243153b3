// After a crash nothing is leaked silently (docs/troubleshooting.md#machines-failed):
// the real binary is SIGKILLed while a Create's clone runs in the simulator.
// The Create comes back FAILED, as the contract asks; the next start's first
// reconcile pass finds the clone (still in flight) by its marker and records
// it as the FAILED machine's host, visible to Get, List and `machines get`;
// it is logged once and counted, the revision moves once, and nothing is
// destroyed.

import assert from "node:assert/strict";
import { Harness, MachineState } from "../harness/mod.ts";
import { logLines, sample, scrape, waitFor } from "../server/helpers.ts";
import { cli } from "../cli/helpers.ts";
import { providerRig } from "./helpers.ts";

const FOUND = "still has its VM";

Deno.test("after a crash: a FAILED Create's in-flight clone is recorded on it, logged once, counted", async () => {
  await using r = await providerRig({ timing: { cloneMs: 12_000 } });
  const first = await r.start();
  const h = new Harness(first.addr);
  const id = (await h.pickSpeculative()).id;
  try {
    await h.create(id);
    // The clone carries the marker from its first config write on.
    await waitFor(
      "the clone is marked",
      () =>
        r.sim.vms().some((vm) => vm.config.lock === "clone" && vm.description?.includes(id)) ||
        undefined,
    );
  } finally {
    h.close();
    await first.stop(); // SIGKILL
  }
  const vm = r.sim.vms().find((v) => v.description?.includes(id))!;
  const hostRef = `${vm.node}/${vm.vmid}`;

  const p = await r.start(["--reconcile-interval=300ms"]);
  const h2 = new Harness(p.addr);
  try {
    const m = await waitFor("the host recorded", async () => {
      const got = await h2.get(id);
      return got.host ? got : undefined;
    });
    assert.equal(m.state, MachineState.FAILED);
    assert.equal(
      m.last_error,
      "create transition interrupted by a provider restart; needs re-drive",
    );
    assert.equal(m.host?.ref, hostRef);
    assert.equal(r.sim.vm(vm.vmid)?.config.lock, "clone", "found while still cloning");
    const listed = (await h2.list()).machines.find((x) => x.id === id);
    assert.equal(listed?.host?.ref, hostRef, "List shows it");
    const shown = await cli(["machines", "get", id, `--target=${p.addr}`, "-o", "json"]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.equal(JSON.parse(shown.stdout).host.ref, hostRef, "machines get shows it");

    const metrics = await scrape(p.metricsPort);
    assert.equal(sample(metrics, "bigfleet_proxmox_failed_machines", { host: "known" }), 1);
    assert.equal(sample(metrics, "bigfleet_proxmox_failed_machines", { host: "unknown" }), 0);

    // More passes, the clone finishing meanwhile: no new change, no new log line.
    const { revision } = await h2.list();
    const passes = async () =>
      sample(await scrape(p.metricsPort), "bigfleet_proxmox_reconcile_total", { outcome: "ok" });
    const after = await passes();
    await waitFor("three more passes", async () => await passes() >= after + 3 || undefined);
    assert.equal((await h2.list({ since_revision: revision })).machines.length, 0);
    const found = logLines(p.stderr()).filter((l) => String(l.message).includes(FOUND));
    assert.equal(found.length, 1, "logged once");
    assert.equal(found[0].machineId, id);
    assert.equal(found[0].hostRef, hostRef);
    assert.ok(r.sim.vm(vm.vmid), "nothing was destroyed");
    assert.equal(r.sim.vm(vm.vmid)?.stops, 0, "nothing was stopped");
  } finally {
    h2.close();
    await p.stop();
  }
});
