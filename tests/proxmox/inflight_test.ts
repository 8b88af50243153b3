// Clones in flight that are not ours: Create waits only for a VM that may
// still turn out to be its own (no name and description yet, or its marker),
// never for a stranger's clone that already shows its own name or no marker.

import assert from "node:assert/strict";
import { logLines, rig, slot } from "./helpers.ts";

/** A stranger's VM held under `lock: clone` (a long full clone, as far as we can tell). */
function strangerClone(
  sim: Awaited<ReturnType<typeof rig>>["sim"],
  vmid: number,
  phase: "nameless" | "named",
) {
  sim.addVm({ vmid, node: "pve1", name: "web-1", template: false, description: "a web server" });
  sim.editVmOutOfBand(vmid, (c) => {
    if (phase === "nameless") { for (const k of Object.keys(c)) delete c[k]; }
    c.lock = "clone";
  });
}

Deno.test("a stranger's clone past its first disk (own name, no marker) does not stall Create", async () => {
  await using r = await rig();
  strangerClone(r.sim, 700, "named");
  const s = slot("pve1");
  // It never finishes: waiting for it would run into this signal.
  const { hostRef } = await r.backend.create(s, AbortSignal.timeout(10_000));
  assert.notEqual(hostRef, "pve1/700");
  assert.equal(r.sim.vm(700)!.lock, "clone", "left alone");
  assert.ok(!logLines.some((l) => /is being cloned; waiting/.test(l) && l.includes(s.machineId)));
});

Deno.test("a nameless clone is waited for until it shows whose it is", async () => {
  await using r = await rig();
  strangerClone(r.sim, 701, "nameless");
  const s = slot("pve1");
  const created = r.backend.create(s, AbortSignal.timeout(10_000));
  // Let Create find it and wait, then the clone writes its full config: a stranger's name, no marker.
  const waited = async () => {
    for (let i = 0; i < 400; i++) {
      if (logLines.some((l) => /is being cloned; waiting/.test(l) && l.includes(s.machineId))) {
        return true;
      }
      await new Promise((res) => setTimeout(res, 10));
    }
    return false;
  };
  assert.ok(await waited(), "Create waited for the nameless clone");
  r.sim.editVmOutOfBand(701, (c) => {
    c.name = "web-2";
    c.cores = 2;
  });
  const { hostRef } = await created;
  assert.notEqual(hostRef, "pve1/701");
  assert.equal(r.sim.vm(701)!.lock, "clone");
});
