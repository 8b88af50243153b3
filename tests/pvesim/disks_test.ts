// Self-tests of disks: PUT …/resize (resize.ts, routes/resize.ts) and where
// a clone's disks go (clonedisk.ts): `storage`, `format`, linked clones and
// their bases, and the storage's used bytes following both.

import assert from "node:assert/strict";
import { type Api, cloneAndWait, rawRequest, until, withSim } from "./testkit.ts";

type Obj = Record<string, unknown>;
const GIB = 1024 ** 3;
const FAST = { cloneMs: 30, cloneNamelessMs: 10, taskMs: 10 };
const STORAGES = [
  { id: "local", type: "dir", content: "iso,vztmpl,backup,snippets" },
  { id: "vmstore", type: "dir", content: "images" },
  { id: "local-lvm", type: "lvmthin" },
  { id: "ceph-vm", type: "rbd" },
  { id: "san", type: "lvm", shared: true },
  { id: "far", type: "lvmthin", nodes: ["pve2"] },
];

async function resize(api: Api, vmid: number, body: Obj): Promise<Obj> {
  const upid = await api.data("PUT", `/nodes/pve1/qemu/${vmid}/resize`, { json: body }) as string;
  assert.match(
    upid,
    new RegExp(`^UPID:pve1:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:resize:${vmid}:`),
  );
  return await api.waitTask(upid);
}

async function used(api: Api, storage: string): Promise<number> {
  return (await api.data("GET", `/nodes/pve1/storage/${storage}/status`) as Obj).used as number;
}

Deno.test("resize: a task grows the disk (+N or absolute N, K/M/G/T or bytes); size= and the storage's used follow", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const before = await used(api, "ceph-vm");
    assert.equal((await resize(api, newid, { disk: "scsi0", size: "+10G" })).exitstatus, "OK");
    assert.equal(sim.vm(newid)!.config.scsi0, `ceph-vm:vm-${newid}-disk-0,size=30G`);
    assert.equal(await used(api, "ceph-vm"), before + 10 * GIB);
    assert.equal((await resize(api, newid, { disk: "scsi0", size: "+512M" })).exitstatus, "OK");
    assert.equal(sim.vm(newid)!.config.scsi0, `ceph-vm:vm-${newid}-disk-0,size=31232M`);
    assert.equal((await resize(api, newid, { disk: "scsi0", size: "40G" })).exitstatus, "OK");
    assert.equal(sim.vm(newid)!.config.scsi0, `ceph-vm:vm-${newid}-disk-0,size=40G`);
    // The same size again does nothing; bytes without a unit work.
    assert.equal(
      (await resize(api, newid, { disk: "scsi0", size: String(40 * GIB) })).exitstatus,
      "OK",
    );
    assert.equal(
      (await resize(api, newid, { disk: "scsi0", size: String(40 * GIB + 1) })).exitstatus,
      "OK",
    );
    assert.equal(sim.vm(newid)!.config.scsi0, `ceph-vm:vm-${newid}-disk-0,size=${40 * GIB + 1}`);
    // maxdisk in resources is the boot disk's size (once pvestatd reported the VM).
    await until(async () =>
      (await api.data("GET", "/cluster/resources?type=vm") as Obj[])
        .find((e) => e.vmid === newid)?.maxdisk === 40 * GIB + 1
    );
  }, { timing: FAST });
});

Deno.test("resize: refusals (shrink, unknown disk, CD-ROM, lock) end the task; parameters and permission are checked first", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const task = (body: Obj) => resize(api, newid, body).then((s) => s.exitstatus);
    assert.equal(await task({ disk: "scsi0", size: "10G" }), "shrinking disks is not supported");
    assert.equal(await task({ disk: "scsi5", size: "+1G" }), "disk 'scsi5' does not exist");
    assert.equal(await task({ disk: "ide2", size: "+1G" }), "you can't resize a cdrom");
    sim.setLock(newid, "backup");
    assert.equal(await task({ disk: "scsi0", size: "+1G" }), "VM is locked (backup)");
    sim.setLock(newid, undefined);
    assert.equal(sim.vm(newid)!.config.scsi0, `ceph-vm:vm-${newid}-disk-0,size=20G`);
    const bad = await api.call("PUT", `/nodes/pve1/qemu/${newid}/resize`, {
      json: { disk: "scsi0", size: "ten" },
    });
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.errors, { size: "value does not match the regex pattern" });
    const badDisk = await api.call("PUT", `/nodes/pve1/qemu/${newid}/resize`, {
      json: { disk: "scsi99", size: "+1G" },
    });
    assert.match(
      badDisk.body.errors.disk,
      /^value 'scsi99' does not have a value in the enumeration 'ide0, ide1, /,
    );
    // VM.Config.Disk on the VM, checked before the task.
    sim.faults.acl = {
      entries: [{ path: "/vms", privs: ["VM.Audit", "VM.Config.Options"], propagate: true }],
    };
    const denied = await rawRequest(sim, "PUT", `/nodes/pve1/qemu/${newid}/resize`, {
      body: "disk=scsi0&size=%2B1G",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
    assert.deepEqual([denied.status, denied.reason], [
      403,
      `Permission check failed (/vms/${newid}, VM.Config.Disk)`,
    ]);
    // Datastore.AllocateSpace on the volume's storage is checked in the task.
    sim.faults.acl = { entries: [{ path: "/vms", privs: ["VM.Config.Disk"], propagate: true }] };
    assert.equal(
      await task({ disk: "scsi0", size: "+1G" }),
      "Permission check failed (/storage/ceph-vm, Datastore.AllocateSpace)",
    );
  }, {
    timing: FAST,
    templates: [{ vmid: 9000, name: "t", config: { ide2: "local:iso/d.iso,media=cdrom" } }],
  });
});

Deno.test("resize before PVE 8.0: answered at once (null), refusals as a 500", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const base = `/nodes/pve1/qemu/${newid}/resize`;
    assert.equal(await api.data("PUT", base, { json: { disk: "scsi0", size: "+1G" } }), null);
    assert.equal(sim.vm(newid)!.config.scsi0, `ceph-vm:vm-${newid}-disk-0,size=21G`);
    const shrink = await rawRequest(sim, "PUT", base, {
      body: JSON.stringify({ disk: "scsi0", size: "1G" }),
      headers: { "Content-Type": "application/json" },
    });
    assert.deepEqual([shrink.status, shrink.reason], [500, "shrinking disks is not supported"]);
  }, { timing: FAST, pveVersion: "7.4.3" });
});

Deno.test("clone storage: must hold images and be on the source node, refused before any task", async () => {
  await withSim(async (sim, api) => {
    const clone = (body: Obj) =>
      api.call("POST", "/nodes/pve1/qemu/9000/clone", { json: { newid: 300, full: 1, ...body } });
    const noImages = await clone({ storage: "local" });
    assert.equal(noImages.status, 400);
    assert.deepEqual(noImages.body.errors, {
      storage: "storage 'local' does not support vm images",
    });
    assert.equal(
      (await clone({ storage: "far" })).body.message,
      "storage 'far' is not available on node 'pve1'\n",
    );
    assert.equal(
      (await clone({ storage: "nope" })).body.message,
      "storage 'nope' does not exist\n",
    );
    assert.equal(sim.tasks().length, 0);
  }, { timing: FAST, storages: STORAGES });
});

Deno.test("clone format: file storages take qcow2/vmdk, others fall back to raw; a file target keeps the source's format", async () => {
  await withSim(async (sim, api) => {
    const disk = async (body: Obj, src = 9000) => {
      const { newid } = await cloneAndWait(api, body, { node: "pve1", vmid: src });
      return [newid, String(sim.vm(newid)!.config.scsi0)] as const;
    };
    let [id, d] = await disk({ storage: "vmstore", format: "qcow2" });
    assert.equal(d, `vmstore:${id}/vm-${id}-disk-0.qcow2,size=20G`);
    [id, d] = await disk({ storage: "vmstore" });
    assert.equal(d, `vmstore:${id}/vm-${id}-disk-0.raw,size=20G`, "an RBD source is raw");
    [id, d] = await disk({ storage: "vmstore" }, 9001);
    assert.equal(d, `vmstore:${id}/vm-${id}-disk-0.qcow2,size=20G`, "a qcow2 source stays qcow2");
    [id, d] = await disk({ storage: "local-lvm", format: "qcow2" });
    assert.equal(d, `local-lvm:vm-${id}-disk-0,size=20G`);
    [id, d] = await disk({ storage: "ceph-vm", format: "vmdk" });
    assert.equal(d, `ceph-vm:vm-${id}-disk-0,size=20G`);
    // A full clone's disks count on the target storage.
    const lvm = await used(api, "local-lvm");
    await disk({ storage: "local-lvm" });
    assert.equal(await used(api, "local-lvm"), lvm + 20 * GIB);
  }, {
    timing: FAST,
    storages: STORAGES,
    templates: [
      { vmid: 9000, name: "rbd" },
      {
        vmid: 9001,
        name: "file",
        storage: "vmstore",
        config: { scsi0: "vmstore:9001/base-9001-disk-0.qcow2,size=20G" },
      },
    ],
  });
});

Deno.test("linked clones: only from a base volume on a storage that can clone; the volume names its base (not on LVM-thin)", async () => {
  await withSim(async (sim, api) => {
    const linked = async (vmid: number) => {
      const { newid, upid, status } = await cloneAndWait(api, { full: 0 }, { node: "pve1", vmid });
      const log = (await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as Obj[]).map((l) => l.t);
      return { newid, status, log, scsi0: String(sim.vm(newid)?.config.scsi0) };
    };
    const rbd = await linked(9000);
    assert.equal(rbd.scsi0, `ceph-vm:base-9000-disk-0/vm-${rbd.newid}-disk-0,size=20G`);
    assert.ok(rbd.log.includes("create linked clone of drive scsi0 (ceph-vm:base-9000-disk-0)"));
    const thin = await linked(9002);
    assert.equal(thin.scsi0, `local-lvm:vm-${thin.newid}-disk-0,size=20G`);
    const file = await linked(9001);
    assert.equal(
      file.scsi0,
      `vmstore:9001/base-9001-disk-0.raw/${file.newid}/vm-${file.newid}-disk-0.qcow2,size=20G`,
    );
    // A linked clone takes no room of its own until it grows.
    const before = await used(api, "ceph-vm");
    await linked(9000);
    assert.equal(await used(api, "ceph-vm"), before);
    // LVM-thick has no clone feature; a VM's (non-base) volume never does.
    const post = (vmid: number, body: Obj) =>
      api.call("POST", `/nodes/pve1/qemu/${vmid}/clone`, { json: { newid: 400, ...body } });
    const thick = await post(9003, {});
    assert.equal(thick.body.message, "Linked clone feature is not supported for drive 'scsi0'\n");
    const plain = await post(9004, { full: 0 });
    assert.equal(plain.body.message, "Linked clone feature is not supported for drive 'scsi0'\n");
    assert.equal(
      (await post(9000, { format: "qcow2" })).body.message,
      "parameter 'format' not allowed for linked clones\n",
    );
    assert.equal(sim.vm(400), undefined);
  }, {
    timing: FAST,
    storages: STORAGES,
    templates: [
      { vmid: 9000, name: "rbd" },
      { vmid: 9001, name: "file", config: { scsi0: "vmstore:9001/base-9001-disk-0.raw,size=20G" } },
      { vmid: 9002, name: "thin", storage: "local-lvm" },
      { vmid: 9003, name: "thick", storage: "san" },
      { vmid: 9004, name: "plain", template: false },
    ],
  });
});

Deno.test("linked clones on PVE 9: the refusal names the volume", async () => {
  await withSim(async (_sim, api) => {
    const r = await api.call("POST", "/nodes/pve1/qemu/9000/clone", { json: { newid: 400 } });
    assert.equal(
      r.body.message,
      "Linked clone feature is not supported for 'san:base-9000-disk-0' (scsi0)\n",
    );
  }, {
    timing: FAST,
    storages: STORAGES,
    pveVersion: "9.0.3",
    templates: [{ vmid: 9000, name: "t", storage: "san" }],
  });
});

Deno.test("destroy: a template with linked clones is refused in the task (where PVE sees the link); a clone frees only its own disk", async () => {
  await withSim(async (sim, api) => {
    const destroy = async (vmid: number) => {
      const upid = await api.data("DELETE", `/nodes/pve1/qemu/${vmid}?purge=1`) as string;
      return (await api.waitTask(upid)).exitstatus;
    };
    const { newid } = await cloneAndWait(api, { full: 0 });
    // The clone inherits the template's protection; clearing it leaves the template's alone.
    await api.data("PUT", `/nodes/pve1/qemu/${newid}/config`, { json: { protection: 0 } });
    assert.equal(sim.vm(9000)!.config.protection, 1);
    await api.data("PUT", "/nodes/pve1/qemu/9000/config", { json: { protection: 0 } });
    assert.equal(
      await destroy(9000),
      "base volume 'ceph-vm:base-9000-disk-0' is still in use by linked cloned",
    );
    assert.ok(sim.vm(9000), "the template stays");
    assert.equal(await destroy(newid), "OK");
    assert.equal(sim.vm(9000)!.config.scsi0, "ceph-vm:base-9000-disk-0,size=20G");
    assert.equal(await destroy(9000), "OK");
    // On LVM-thin the link is a thin snapshot PVE does not track: nothing stops the destroy.
    const thin = await cloneAndWait(api, { full: 0 }, { node: "pve1", vmid: 9002 });
    assert.equal(thin.status.exitstatus, "OK");
    assert.equal(await destroy(9002), "OK");
  }, {
    timing: FAST,
    templates: [
      { vmid: 9000, name: "rbd", config: { protection: 1 } },
      { vmid: 9002, name: "thin", storage: "local-lvm" },
    ],
  });
});
