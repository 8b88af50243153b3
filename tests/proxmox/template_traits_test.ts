// What a clone inherits from its template on a real cluster, and what the
// provider must undo or wait out: protection, sockets/vcpus, and template
// locks (a vzdump backup).

import assert from "node:assert/strict";
import { BackendError } from "../../src/kit/backend.ts";
import { logLines, rig, signal, slot, vmidOf } from "./helpers.ts";

Deno.test("protection: clones never carry the template's, so Delete works", async () => {
  await using r = await rig({
    templates: [{ vmid: 9000, name: "t", config: { protection: 1 } }],
  });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vm = r.sim.vm(vmidOf(hostRef))!;
  assert.equal(Number(vm.config.protection ?? 0), 0);
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmidOf(hostRef)), undefined);
});

Deno.test("protection: Delete clears it on a VM the marker proves ours", async () => {
  await using r = await rig();
  const s = slot("pve2");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.editConfig(vmidOf(hostRef), { protection: 1 });
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmidOf(hostRef)), undefined);
});

Deno.test("protection: a protected VM that is no longer ours is left alone", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  r.sim.editConfig(vmid, { protection: 1, description: "someone else's now", tags: "prod" });
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmid)!.config.protection, 1);
  assert.ok(!r.sim.requests.some((q) => q.method === "DELETE"));
});

Deno.test("vCPUs: the clone has the instance type's count whatever sockets/vcpus the template has", async () => {
  await using r = await rig({
    templates: [{ vmid: 9000, name: "t", cores: 2, config: { sockets: 2, vcpus: 3 } }],
  });
  // The backend sizes a clone from its catalog: pve.small has 2 vCPUs, pve.medium 4.
  for (const [instanceType, vcpu] of [["pve.small", 2], ["pve.medium", 4]] as const) {
    assert.equal(r.cfg.catalog.get(instanceType)?.vcpu, vcpu);
    const { hostRef } = await r.backend.create(slot("pve1", { instanceType }), signal());
    const vmid = vmidOf(hostRef);
    const c = r.sim.vm(vmid)!.config;
    assert.equal(Number(c.sockets), 1);
    assert.equal(Number(c.cores), vcpu);
    assert.equal(String(c.memory), String(r.cfg.catalog.get(instanceType)!.memoryMib));
    assert.equal("vcpus" in c, false);
    const cur = await (await fetch(
      `${r.sim.url}/nodes/pve1/qemu/${vmid}/status/current`,
      {
        headers: { Authorization: r.sim.authHeader },
        client: Deno.createHttpClient({ caCerts: [r.sim.caPem] }),
      },
    )).json();
    assert.equal(cur.data.cpus, vcpu);
  }
});

Deno.test("locks: Create waits for a template's backup to end instead of failing", async () => {
  await using r = await rig();
  const backup = r.sim.backupVm(9000, 400);
  let backupDone = false;
  backup.then(() => backupDone = true);
  const { hostRef } = await r.backend.create(slot("pve2"), signal());
  assert.ok(backupDone, "the clone ran only after the backup");
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
  assert.ok(logLines.some((l) => /template 9000 .*locked \(backup\).*waiting/.test(l)));
});

Deno.test("locks: a lock taken between the check and the clone POST is waited out too", async () => {
  await using r = await rig();
  let backup: Promise<void> | undefined;
  r.sim.faults.onRequest = (method, path) => {
    // nextid comes after the template was read and before the clone POST.
    if (backup === undefined && method === "GET" && path === "/cluster/nextid") {
      backup = r.sim.backupVm(9000, 300);
    }
  };
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.ok(backup, "the lock was taken mid-Create");
  const refused = r.sim.requests.filter((q) => q.path.endsWith("/clone") && q.status === 500);
  assert.equal(refused.length, 1, "the POST met the lock once");
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});

Deno.test("locks: a lock met by the clone task (taken after the POST) is waited out too", async () => {
  await using r = await rig();
  let backup: Promise<void> | undefined;
  r.sim.faults.onRequest = (method, path) => {
    if (backup === undefined && method === "POST" && path.endsWith("/clone")) {
      // After the POST's own checks, before its worker starts.
      queueMicrotask(() => backup = r.sim.backupVm(9000, 300));
    }
  };
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.ok(backup, "the lock was taken mid-Create");
  const failed = r.sim.tasks().filter((t) => t.type === "qmclone" && t.exitstatus !== "OK");
  assert.deepEqual(failed.map((t) => t.exitstatus), ["VM is locked (backup)"]);
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});

Deno.test("locks: the wait for a template lock ends with Create's signal", async () => {
  await using r = await rig();
  r.sim.setLock(9000, "backup");
  const ac = new AbortController();
  setTimeout(() => ac.abort(new DOMException("create timed out", "TimeoutError")), 300);
  const err = await r.backend.create(slot("pve1"), ac.signal).then(() => null, (e) => e);
  assert.ok(err !== null, "create must not succeed");
  assert.ok(!(err instanceof BackendError), `aborted, not refused: ${err}`);
  assert.equal(ac.signal.aborted, true);
  assert.equal(r.sim.tasks().filter((t) => t.type === "qmclone").length, 0);
});
