// Create / Configure / Drain / Delete / describe against the simulator.

import assert from "node:assert/strict";
import { BackendError } from "../../src/kit/backend.ts";
import { DEFAULT_TIMEOUTS } from "../../src/kit/timeouts.ts";
import { kubectlDrainTimeout } from "../../src/proxmox/drain.ts";
import { rig, signal, slot, vmidOf } from "./helpers.ts";

Deno.test("create clones, sizes, tags, starts and waits for the agent", async () => {
  await using r = await rig();
  const s = slot("pve2");
  const { hostRef } = await r.backend.create(s, signal());
  assert.match(hostRef, /^pve2\/\d+$/);
  const vm = r.sim.vm(vmidOf(hostRef))!;
  assert.equal(vm.node, "pve2");
  assert.equal(vm.status, "running");
  assert.equal(vm.pool, "bigfleet");
  assert.equal(Number(vm.config.cores), 2);
  assert.equal(String(vm.config.memory), "4096");
  assert.equal(vm.config.tags, "bigfleet", "--proxmox-tags, in place of the template's");
  assert.equal(vm.config.name, "bigfleet-proxmox-ondemand-pve-small-pve2-001");
  assert.match(
    String(vm.config.description),
    /"machine_id":"proxmox\/OnDemand\/pve.small\/pve2\/001"/,
  );
  const clone = r.sim.requests.find((q) => q.method === "POST" && q.path.endsWith("/clone"))!;
  assert.equal(clone.path, "/nodes/pve1/qemu/9000/clone");
  assert.equal(clone.params?.target, "pve2");
  assert.ok(
    String(clone.params?.description).includes(s.machineId),
    "marker sent in the clone POST",
  );
  assert.deepEqual(r.observed.map((o) => `${o.op}:${o.outcome}`), [
    "CloneVM:ok",
    "EnsureRunning:ok",
  ]);
  assert.equal(r.sim.vms().filter((v) => !v.template).length, 1);
});

Deno.test("configure writes the blob, runs the hook; drain runs kubectl; delete destroys", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  const blob = new TextEncoder().encode("#!/bin/sh\necho join\n");
  await r.backend.configure({ machineId: s.machineId, hostRef }, {
    clusterId: "c1",
    bootstrap: blob,
  }, signal());
  const vm = r.sim.vm(vmid)!;
  assert.equal(vm.bootstrapRuns.length, 1);
  assert.deepEqual(vm.bootstrapRuns[0].argv, ["/bin/sh", "/run/bigfleet-bootstrap"]);
  assert.deepEqual(vm.bootstrapRuns[0].content, blob);
  assert.equal(vm.fileWrites[0].encode, false);

  await r.backend.drain({ machineId: s.machineId, hostRef }, 30n, signal());
  const drains = r.sim.vm(vmid)!.drains;
  assert.equal(drains.length, 1);
  const cmd = drains[0].command.join(" ");
  assert.match(
    cmd,
    /kubectl drain .* --ignore-daemonsets --delete-emptydir-data --grace-period=30 --timeout=\d+s/,
  );

  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmid), undefined);
  const del = r.sim.requests.find((q) => q.method === "DELETE")!;
  assert.match(del.query, /purge=1/);
  assert.match(del.query, /destroy-unreferenced-disks=1/);
  // Stopped first: destroy of a running VM would have been refused.
  assert.ok(r.sim.requests.some((q) => q.path.endsWith("/status/stop")));
  assert.deepEqual(
    r.observed.map((o) => `${o.op}:${o.outcome}`),
    [
      "CloneVM:ok",
      "EnsureRunning:ok",
      "EnsureRunning:ok",
      "Configure:ok",
      "EnsureRunning:ok",
      "Drain:ok",
      "DeleteVM:ok",
    ],
  );
});

Deno.test("describe lists managed VMs with their machine ids, not templates or strangers", async () => {
  await using r = await rig();
  r.sim.addVm({ vmid: 500, name: "someone-else", template: false, tags: "prod" });
  const a = slot("pve1");
  const b = slot("pve2");
  const ra = await r.backend.create(a, signal());
  const rb = await r.backend.create(b, signal());
  const vms = await r.backend.describe(signal());
  assert.deepEqual(
    vms.map((v) => [v.machineId, v.hostRef, v.cloning]).sort(),
    [[a.machineId, ra.hostRef, false], [b.machineId, rb.hostRef, false]].sort(),
  );
  // A zone is a node; a VM without a slot is listed as pve.orphan (the kit takes both from here).
  assert.deepEqual(
    vms.map((v) => [v.zone, v.instanceType]).sort(),
    [["pve1", "pve.orphan"], ["pve2", "pve.orphan"]],
  );
  assert.ok(r.observed.some((o) => o.op === "DescribeManaged" && o.outcome === "ok"));
});

Deno.test("create of an instance type the catalog lacks fails before any API call", async () => {
  await using r = await rig();
  const before = r.sim.requests.length;
  await assert.rejects(
    r.backend.create(slot("pve1", { instanceType: "pve.nope" }), signal()),
    (e) =>
      e instanceof BackendError && /instance type pve\.nope is not in the catalog/.test(e.message),
  );
  assert.equal(r.sim.requests.length, before);
  assert.deepEqual(r.observed, [], "no operation was attempted");
});

Deno.test("drain: kubectl's timeout ends before the kit's Drain timeout it was given", async () => {
  // 2 minutes for the whole Drain: kubectl gets 112 s, leaving 8 s for the exec to report.
  await using r = await rig({}, {}, { timeouts: { drain: 120_000 } });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  await r.backend.drain({ machineId: s.machineId, hostRef }, 30n, signal());
  const cmd = r.sim.vm(vmidOf(hostRef))!.drains[0].command.join(" ");
  assert.match(cmd, / --grace-period=30 --timeout=112s/);
});

Deno.test("delete of an already-gone VM succeeds without destroying anything", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.deleteVmOutOfBand(vmidOf(hostRef));
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.ok(!r.sim.requests.some((q) => q.method === "DELETE"));
});

Deno.test("configure refuses a VM whose VMID now belongs to another machine", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  await assert.rejects(
    r.backend.configure({ machineId: "someone/else", hostRef }, {
      clusterId: "c",
      bootstrap: new Uint8Array(4),
    }, signal()),
    (e) => e instanceof BackendError && /not the VM made for machine/.test(e.message),
  );
  assert.equal(r.sim.vm(vmidOf(hostRef))!.fileWrites.length, 0);
});

Deno.test("kubectl drain timeout: grace + 120 s within 600–840 s under the default 15m, below any shorter one", () => {
  const old = (grace: number) => Math.min(840, Math.max(600, grace + 120));
  for (const grace of [-1, 0, 30, 479, 480, 600, 719, 720, 86_400]) {
    assert.equal(kubectlDrainTimeout(grace, DEFAULT_TIMEOUTS.drain), old(grace), `grace ${grace}`);
  }
  for (const ms of [2_000, 60_000, 120_000, 600_000, 899_000]) {
    const t = kubectlDrainTimeout(30, ms);
    assert.ok(t >= 1 && t < ms / 1000, `${ms} ms: kubectl gets ${t} s`);
  }
});
