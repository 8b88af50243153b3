// Clones in flight that are not ours: Create waits only for a VM that may
// still turn out to be its own (its temporary config while a clone task of
// our token runs, or its marker; tests/proxmox/own_clone_test.ts), never for
// a stranger's clone that already shows its own name or no marker.

import assert from "node:assert/strict";
import { logLines, rig, slot } from "./helpers.ts";

/** A stranger's VM past its first disk, held under `lock: clone` (a long full clone). */
function strangerClone(sim: Awaited<ReturnType<typeof rig>>["sim"], vmid: number) {
  sim.addVm({ vmid, node: "pve1", name: "web-1", template: false, description: "a web server" });
  sim.editVmOutOfBand(vmid, (c) => void (c.lock = "clone"));
}

Deno.test("a stranger's clone past its first disk (own name, no marker) does not stall Create", async () => {
  await using r = await rig();
  strangerClone(r.sim, 700);
  const s = slot("pve1");
  // It never finishes: waiting for it would run into this signal.
  const { hostRef } = await r.backend.create(s, AbortSignal.timeout(10_000));
  assert.notEqual(hostRef, "pve1/700");
  assert.equal(r.sim.vm(700)!.lock, "clone", "left alone");
  assert.ok(!logLines.some((l) => /is being cloned; waiting/.test(l) && l.includes(s.machineId)));
});
