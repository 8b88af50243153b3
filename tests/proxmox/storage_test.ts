// Storage problems on a real cluster: an offline image storage under
// destroy-unreferenced-disks, and storage errors that must not be taken for
// "the VM does not exist".

import assert from "node:assert/strict";
import { BackendError } from "../../src/kit/backend.ts";
import { missingVerdict, TaskFailedError } from "../../src/proxmox/api/errors.ts";
import { logLines, rig, signal, slot, vmidOf } from "./helpers.ts";

Deno.test("delete with an offline image storage: retried without destroy-unreferenced-disks, VM gone", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  r.sim.faults.offlineStorages = ["nfs-images"];
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmid), undefined, "the VM is gone");
  const destroys = r.sim.tasks().filter((t) => t.type === "qmdestroy");
  assert.deepEqual(
    destroys.map((t) => t.exitstatus),
    ["storage 'nfs-images' is not online", "OK"],
    "one failed destroy with the flag, one without",
  );
  const withoutFlag = r.sim.requests.filter((q) => q.method === "DELETE").map((q) => q.query);
  assert.match(withoutFlag[0], /destroy-unreferenced-disks=1/);
  assert.doesNotMatch(withoutFlag[1], /destroy-unreferenced-disks/);
  assert.ok(
    logLines.some((l) =>
      l.includes(`"vmid":${vmid}`) && /nfs-images/.test(l) && /by hand|manually/.test(l)
    ),
    "the operator is told which disks may be left behind",
  );
});

Deno.test("a start task failing on storage is reported as a storage problem, not as a missing VM", async () => {
  await using r = await rig();
  r.sim.faults.taskError.qmstart = { message: "storage 'nfs-images' does not exist", times: 10 };
  const err = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
  assert.ok(err instanceof BackendError, String(err));
  assert.match(err.message, /storage 'nfs-images' does not exist/);
  assert.match(err.message, /storage problem/);
  assert.doesNotMatch(err.message, /VM \d+ does not exist/);
});

Deno.test("a destroy task failing on storage is reported as such; the VM is not declared gone", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.taskError.qmdestroy = { message: "storage 'nfs-images' does not exist", times: 10 };
  const err = await r.backend.delete({ machineId: s.machineId, hostRef }, signal()).then(
    () => null,
    (e) => e,
  );
  assert.ok(err instanceof BackendError, String(err));
  assert.match(err.message, /storage problem.*storage 'nfs-images' does not exist/);
  assert.ok(r.sim.vm(vmidOf(hostRef)), "the VM still exists");
});

Deno.test("only a missing VM's own texts count as missing", () => {
  const task = (exit: string) => new TaskFailedError(exit, exit);
  for (
    const exit of [
      "Configuration file 'nodes/pve1/qemu-server/105.conf' does not exist",
      "unable to find configuration file for VM 105 on node 'pve1'",
    ]
  ) assert.equal(missingVerdict(task(exit)), "missing", exit);
  for (
    const exit of [
      "storage 'nfs-images' does not exist",
      "clone failed: storage 'local-zfs' does not exist",
      "snapshot 'pre' does not exist",
      "volume 'local-lvm:vm-105-disk-0' does not exist",
      "pool 'x' does not exist",
    ]
  ) assert.equal(missingVerdict(task(exit)), "present", exit);
});
