// Smaller real-cluster facts (docs/proxmox-notes.md): the datacenter's
// next-id range bounds the VMID search, a guest-agent `got timeout` on
// file-write is retried, the sizing check reads pending values, and `agent`
// takes every PVE boolean spelling.

import assert from "node:assert/strict";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import { agentEnabled } from "../../src/proxmox/vm/agent.ts";
import { Api } from "../pvesim/testkit.ts";
import { FAST, rig, signal, slot, vmidOf } from "./helpers.ts";

Deno.test("VMIDs stay inside the datacenter's next-id range when the search steps past one", async () => {
  // A one-VMID range. The first clone loses a race for 5000; by the next nextid the
  // winner is gone again, so nextid answers 5000, which Create still avoids for a while.
  await using r = await rig({ datacenter: { nextId: { lower: 5000, upper: 5001 } } });
  r.sim.faults.nextidRace = 1;
  r.sim.faults.onRequest = (_method, path) => {
    if (path === "/cluster/nextid" && r.sim.vm(5000)?.foreign) r.sim.deleteVmOutOfBand(5000);
  };
  const err = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
  assert.match(String(err), /no free VMID in the datacenter's next-id range \[5000, 5001\)/);
  assert.deepEqual(
    r.sim.vms().filter((v) => !v.template && v.vmid >= 5001).map((v) => v.vmid),
    [],
    "nothing cloned above the range",
  );
});

Deno.test("a guest-agent `got timeout` on file-write is retried (the write truncates)", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  let armed = true;
  r.sim.faults.onRequest = (_method, path) => {
    if (armed && path.endsWith("/agent/file-write")) {
      armed = false;
      r.sim.faults.agentTimeouts = 1;
    }
  };
  const blob = new TextEncoder().encode("#!/bin/sh\necho join\n");
  await r.backend.configure({ machineId: s.machineId, hostRef }, {
    clusterId: "c1",
    bootstrap: blob,
  }, signal());
  const vm = r.sim.vm(vmidOf(hostRef))!;
  const writes = r.sim.requests.filter((q) => q.path.endsWith("/agent/file-write"));
  assert.equal(writes.length, 2, "the timed-out write was sent again");
  assert.equal(writes[0].status, 500);
  assert.deepEqual(vm.bootstrapRuns.map((b) => b.content), [blob], "delivered and run once");
});

Deno.test("an adopted running VM whose size is only pending is stopped so its start applies it", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  // As a Create cut short can leave it: running on the template's size, its own size pending.
  r.sim.editConfig(vmid, { cores: 1, memory: "2048" });
  const api = new Api(r.sim);
  try {
    await api.data("PUT", `/nodes/pve1/qemu/${vmid}/config`, {
      json: { cores: 2, memory: "4096" },
    });
  } finally {
    api.close();
  }
  assert.deepEqual(r.sim.vm(vmid)!.pending, { cores: 2, memory: "4096" });
  // A restart without state adopts it: GET config shows the pending size as if applied.
  const again = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    assert.equal((await again.create(s, signal())).hostRef, hostRef);
  } finally {
    await again.close();
  }
  const vm = r.sim.vm(vmid)!;
  assert.equal(vm.status, "running");
  assert.deepEqual(vm.pending, {}, "applied by the start");
  assert.equal(Number(vm.config.cores), 2);
  assert.equal(vm.config.memory, "4096");
  assert.equal(vm.stops, 1, "stopped once to apply it");
});

Deno.test("`agent` in every PVE boolean spelling enables the agent", async () => {
  for (
    const on of [
      "1",
      "enabled=on",
      "enabled=YES",
      "enabled=True,fstrim_cloned_disks=1",
      "type=virtio,1",
    ]
  ) {
    assert.equal(agentEnabled(on), true, on);
  }
  // The bare form takes only 1 and 0: PVE refuses `agent: on` and drops it from a config.
  for (
    const off of ["0", "enabled=off", "enabled=no", "enabled=0", "", "on", "yes", "enabled=maybe"]
  ) {
    assert.equal(agentEnabled(off), false, off);
  }
  await using r = await rig({ templates: [{ vmid: 9000, name: "tmpl", agent: "enabled=yes" }] });
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});
