// Self-tests of what a real cluster does to clones and templates beyond the
// happy path: storages (shared or not, per volume), the copy of every
// template key, protection, template locks, the vCPU count, and clone
// durations of minutes scaled down with their phases intact.

import assert from "node:assert/strict";
import { scaledTiming } from "./mod.ts";
import { type Api, cloneAndWait, rawRequest, until, withSim } from "./testkit.ts";

type Obj = Record<string, unknown>;
const FAST = { cloneMs: 40, cloneNamelessMs: 10, taskMs: 10 };

Deno.test("storage: storage.cfg with shared resolved like pve-storage, per node, hidden ones left out", async () => {
  await withSim(async (sim, api) => {
    const list = await api.data("GET", "/storage") as Obj[];
    assert.deepEqual(
      list.map((s) => [s.storage, s.type, s.shared ?? 0, s.nodes ?? ""]),
      [
        ["ceph-vm", "rbd", 1, ""], // rbd is always shared
        ["local", "dir", 0, ""],
        ["local-lvm", "lvmthin", 0, ""],
        ["nfs-img", "nfs", 1, ""],
        ["san", "lvm", 1, "pve1,pve2"], // marked shared in storage.cfg
        ["zlocal", "zfspool", 0, "pve2"],
      ],
    );
    const res = (await api.data("GET", "/cluster/resources?type=storage") as Obj[])
      .map((e) => `${e.node}/${e.storage}:${e.shared}`);
    assert.ok(res.includes("pve2/zlocal:0"));
    assert.ok(!res.includes("pve1/zlocal:0"), "zlocal exists on pve2 only");
    assert.ok(res.includes("pve1/ceph-vm:1"));
    // A token without Datastore.Audit/AllocateSpace on a storage does not see it: no 403.
    sim.faults.hiddenStorages = ["local", "nfs-img"];
    const seen = (await api.data("GET", "/storage") as Obj[]).map((s) => s.storage);
    assert.deepEqual(seen, ["ceph-vm", "local-lvm", "san", "zlocal"]);
    const seenRes = (await api.data("GET", "/cluster/resources?type=storage") as Obj[])
      .map((e) => e.storage);
    assert.ok(!seenRes.includes("local") && !seenRes.includes("nfs-img"));
  }, {
    storages: [
      { id: "local", type: "dir" },
      { id: "local-lvm", type: "lvmthin" },
      { id: "ceph-vm", type: "rbd" },
      { id: "nfs-img", type: "nfs" },
      { id: "san", type: "lvm", shared: true, nodes: ["pve1", "pve2"] },
      { id: "zlocal", type: "zfspool", nodes: ["pve2"] },
    ],
  });
});

Deno.test("clone to another node: every volume must be on shared storage (disk, ISO, cloud-init)", async () => {
  await withSim(async (sim, api) => {
    const clone = (vmid: number, body: Obj = {}) =>
      api.call("POST", `/nodes/pve1/qemu/${vmid}/clone`, {
        json: { newid: 300, full: 1, target: "pve2", ...body },
      });
    const LOCAL = "can't clone VM to node 'pve2' (VM uses local storage)\n";
    // Shared disk, empty or physical CD-ROM: fine (checked last: only pre-checks matter here).
    for (const vmid of [9000, 9004]) {
      const r = await clone(vmid, { newid: 300 + vmid - 9000 });
      assert.equal(r.status, 200, `${vmid}: ${r.text}`);
    }
    // Any local volume refuses the target, whatever full/storage say.
    for (const vmid of [9001, 9002, 9003]) {
      const r = await rawRequest(sim, "POST", `/nodes/pve1/qemu/${vmid}/clone`, {
        body: JSON.stringify({ newid: 310, full: 1, target: "pve2", storage: "ceph-vm" }),
        headers: { "Content-Type": "application/json" },
      });
      assert.equal(r.status, 500, String(vmid));
      assert.equal(r.reason, LOCAL.trim(), String(vmid));
    }
    // Without a target the same templates clone fine on their own node.
    const own = await cloneAndWait(api, {}, { node: "pve1", vmid: 9003 });
    assert.equal(own.status.exitstatus, "OK");
    // A full clone's disks land on the source storage unless `storage` says otherwise.
    assert.match(String(sim.vm(own.newid)!.config.scsi0), /^local-lvm:vm-\d+-disk-0,size=20G$/);
    const moved = await cloneAndWait(api, { storage: "ceph-vm" }, { node: "pve1", vmid: 9003 });
    assert.match(String(sim.vm(moved.newid)!.config.scsi0), /^ceph-vm:vm-\d+-disk-0,/);
    // `storage` with a target must itself be shared; unknown storages die.
    const nonShared = await clone(9000, { storage: "local-lvm" });
    assert.equal(nonShared.body.message, "can't clone to non-shared storage 'local-lvm'\n");
    const unknown = await clone(9000, { storage: "nope" });
    assert.equal(unknown.body.message, "storage 'nope' does not exist\n");
    const missing = await clone(9005);
    assert.equal(missing.body.message, "storage 'gone' does not exist\n");
    // None of the refusals started a task.
    assert.equal(sim.tasks().filter((t) => t.id !== "9003").length, 2);
  }, {
    timing: FAST,
    templates: [
      { vmid: 9000, name: "shared", config: { ide2: "none,media=cdrom" } },
      { vmid: 9001, name: "iso", config: { ide2: "local:iso/debian-12.iso,media=cdrom" } },
      { vmid: 9002, name: "ci", config: { ide2: "local-lvm:vm-9002-cloudinit,media=cdrom" } },
      { vmid: 9003, name: "disk", sharedStorage: false },
      { vmid: 9004, name: "phys", config: { ide2: "cdrom,media=cdrom" } },
      { vmid: 9005, name: "lost", storage: "gone" },
    ],
  });
});

Deno.test("clone: copies every non-snapshot key, drives one by one, name only after the first", async () => {
  await withSim(async (sim, api) => {
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 120, full: 1, name: "c120" },
    }) as string;
    // Record which drives the config names, in the order they appear.
    const seen: string[] = [];
    let namedBeforeFirstDrive = false;
    await until(() => {
      const c = sim.vm(120)?.config;
      if (c) {
        const drives = ["ide2", "scsi0", "scsi1"].filter((k) => k in c).join("+") || "-";
        if (seen.at(-1) !== drives) seen.push(drives);
        if (drives === "-" && "name" in c) namedBeforeFirstDrive = true;
      }
      return c !== undefined && !("lock" in c);
    }, 5000);
    assert.deepEqual(seen, ["-", "ide2", "ide2+scsi0", "ide2+scsi0+scsi1"]);
    assert.equal(namedBeforeFirstDrive, false);
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    const c = sim.vm(120)!.config;
    const t = sim.vm(9000)!.config;
    for (
      const k of ["protection", "sockets", "vcpus", "cpulimit", "onboot", "hookscript", "ide0"]
    ) {
      assert.equal(c[k], t[k], k);
    }
    assert.match(String(c.net0), /^virtio=[0-9A-F:]{17},bridge=vmbr0,tag=20$/);
    assert.notEqual(c.net0, t.net0);
    assert.equal(c.ide2, "ceph-vm:vm-120-cloudinit,media=cdrom");
    assert.equal(c.scsi1, "ceph-vm:vm-120-disk-1,size=50G");
    assert.equal("unused0" in c, false);
    assert.equal("template" in c, false);
    assert.notEqual(c.vmgenid, t.vmgenid);
    assert.match(String(c.smbios1), /^uuid=[0-9a-f-]{36}$/);
    assert.notEqual(c.smbios1, t.smbios1);
  }, {
    timing: { cloneMs: 300, cloneNamelessMs: 90 },
    templates: [{
      vmid: 9000,
      name: "tmpl",
      config: {
        protection: 1,
        sockets: 2,
        vcpus: 3,
        cpulimit: "2",
        onboot: 1,
        hookscript: "local:snippets/hook.pl",
        net0: "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20",
        scsi1: "ceph-vm:base-9000-disk-1,size=50G",
        ide2: "ceph-vm:vm-9000-cloudinit,media=cdrom",
        ide0: "none,media=cdrom",
        unused0: "ceph-vm:vm-9000-disk-9",
      },
    }],
  });
});

Deno.test("protection: destroy refused at once, PUT protection=0 clears it", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    assert.equal(sim.vm(newid)!.config.protection, 1, "inherited from the template");
    const base = `/nodes/pve1/qemu/${newid}`;
    const refused = await rawRequest(sim, "DELETE", `${base}?purge=1`);
    assert.equal(refused.status, 500);
    assert.equal(refused.reason, `can't remove VM ${newid} - protection mode enabled`);
    assert.equal(sim.tasks().filter((t) => t.type === "qmdestroy").length, 0);
    await api.data("PUT", `${base}/config`, { json: { protection: 0 } });
    assert.equal(sim.vm(newid)!.config.protection, 0);
    // Set by hand (root editing the config), it refuses again.
    sim.editConfig(newid, { protection: 1 });
    assert.equal(
      (await api.call("DELETE", base)).body.message,
      `can't remove VM ${newid} - protection mode enabled\n`,
    );
    sim.editConfig(newid, { protection: null });
    assert.equal("protection" in sim.vm(newid)!.config, false);
    const upid = await api.data("DELETE", `${base}?purge=1`) as string;
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    assert.equal(sim.vm(newid), undefined);
  }, { timing: FAST, templates: [{ vmid: 9000, name: "t", config: { protection: 1 } }] });
});

Deno.test("locks: a template under backup refuses clone and config at once, until vzdump ends", async () => {
  await withSim(async (sim, api) => {
    const backup = sim.backupVm(9000, 300);
    assert.equal(sim.vm(9000)!.lock, "backup");
    const clone = await rawRequest(sim, "POST", "/nodes/pve1/qemu/9000/clone", {
      body: "newid=130&full=1",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
    assert.equal(clone.status, 500);
    assert.equal(clone.reason, "VM is locked (backup)");
    const put = await api.call("PUT", "/nodes/pve1/qemu/9000/config", { json: { onboot: 1 } });
    assert.equal(put.body.message, "VM is locked (backup)\n");
    const res = (await api.data("GET", "/cluster/resources?type=vm") as Obj[])
      .find((e) => e.vmid === 9000)!;
    assert.equal(res.lock, "backup");
    assert.equal(sim.tasks().length, 0);
    await backup;
    assert.equal(sim.vm(9000)!.lock, undefined);
    assert.equal((await cloneAndWait(api)).status.exitstatus, "OK");
    // Any lock value works the same way; setLock(undefined) is `qm unlock`.
    sim.setLock(9000, "migrate");
    const r = await api.call("POST", "/nodes/pve1/qemu/9000/clone", { json: { newid: 140 } });
    assert.equal(r.body.message, "VM is locked (migrate)\n");
    sim.setLock(9000, undefined);
    assert.equal((await cloneAndWait(api)).status.exitstatus, "OK");
    // A lock taken after the POST's checks but before its worker runs fails the task:
    // the worker checks the source again under its own locks. onRequest stages that race.
    let staged = false;
    sim.faults.onRequest = (method, path) => {
      if (!staged && method === "POST" && path.endsWith("/clone")) {
        staged = true;
        queueMicrotask(() => sim.setLock(9000, "backup"));
      }
    };
    const late = await cloneAndWait(api);
    assert.equal(late.status.exitstatus, "VM is locked (backup)");
    assert.equal(sim.vm(late.newid), undefined, "nothing was created");
  }, { timing: FAST });
});

Deno.test("vCPUs: sockets × cores, vcpus overrides; PUT delete semantics", async () => {
  await withSim(async (sim, api) => {
    const cpus = async (vmid: number) =>
      (await api.data("GET", `/nodes/pve1/qemu/${vmid}/status/current`) as Obj).cpus;
    const maxcpu = async (vmid: number) =>
      ((await api.data("GET", "/cluster/resources?type=vm") as Obj[])
        .find((e) => e.vmid === vmid)!).maxcpu;
    assert.equal(await cpus(9000), 6, "2 sockets × 3 cores");
    assert.equal(await cpus(9001), 3, "vcpus wins");
    assert.equal(await maxcpu(9001), 3);
    const { newid } = await cloneAndWait(api, {}, { node: "pve1", vmid: 9001 });
    const path = `/nodes/pve1/qemu/${newid}/config`;
    // Setting and deleting one key at once, or an unknown key, is a 400 before anything changes.
    const both = await api.call("PUT", path, { json: { vcpus: 2, delete: "vcpus" } });
    assert.equal(both.status, 400);
    assert.deepEqual(both.body.errors, {
      delete: "you can't use '-vcpus' and -delete vcpus' at the same time",
    });
    const unknown = await api.call("PUT", path, { json: { cores: 2, delete: "nonsense" } });
    assert.deepEqual(unknown.body.errors, { delete: "unknown option 'nonsense'" });
    assert.equal(sim.vm(newid)!.config.cores, 3);
    await api.data("PUT", path, { json: { sockets: 1, cores: 4, delete: "vcpus,balloon" } });
    const c = sim.vm(newid)!.config;
    assert.equal("vcpus" in c, false);
    assert.equal(await cpus(newid), 4);
    // Deleting a key that is not set is only a warning.
    assert.equal((await api.call("PUT", path, { json: { delete: "vcpus" } })).status, 200);
  }, {
    timing: { ...FAST, resourcesLagMs: 0 },
    templates: [
      { vmid: 9000, name: "a", cores: 3, config: { sockets: 2 } },
      { vmid: 9001, name: "b", cores: 3, config: { sockets: 2, vcpus: 3 } },
    ],
  });
});

Deno.test("timing: a real multi-minute clone, time-scaled, keeps its phases in proportion", async () => {
  const timing = scaledTiming(1 / 400); // a 3 minute clone in 450 ms
  assert.equal(timing.cloneMs, 450);
  assert.equal(timing.resourcesLagMs, 25);
  await withSim(async (sim, api: Api) => {
    const t0 = performance.now();
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 160, full: 1, name: "slow" },
    }) as string;
    await until(() => sim.vm(160)?.lock === "clone");
    await until(() => sim.vm(160)?.name === "slow", 5000);
    const named = performance.now() - t0;
    await api.waitTask(upid, 10_000);
    const done = performance.now() - t0;
    // The nameless first-disk phase is most of the clone (170 of 180 s on a real cluster).
    assert.ok(named / done > 0.6, `name after ${named} ms of ${done} ms`);
  }, { timing });
});
