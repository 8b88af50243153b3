// Self-tests of the real-cluster behaviours: offline storages under destroy,
// offline nodes behind pveproxy, SDN.Use ACLs with propagation, and the
// description codec of older pve-common.

import assert from "node:assert/strict";
import { cloneAndWait, rawRequest, withSim } from "./testkit.ts";

type Obj = Record<string, unknown>;

Deno.test("offline storage: destroy-unreferenced-disks dies after freeing disks, every retry too; without the flag it goes", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "victim" });
    sim.faults.offlineStorages = ["nfs-images"];
    const storages = await api.data("GET", "/cluster/resources?type=storage") as Obj[];
    assert.ok(storages.some((s) => s.storage === "nfs-images" && s.status === "unknown"));

    const destroy = async (flag: boolean) => {
      const q = flag ? "?purge=1&destroy-unreferenced-disks=1" : "?purge=1";
      const upid = await api.data("DELETE", `/nodes/pve1/qemu/${newid}${q}`) as string;
      return (await api.waitTask(upid)).exitstatus;
    };
    for (let i = 0; i < 2; i++) {
      assert.equal(await destroy(true), "storage 'nfs-images' is not online");
      // The config stays, unlocked, still naming its (now freed) disk.
      const vm = sim.vm(newid)!;
      assert.equal(vm.lock, undefined);
      assert.match(String(vm.config.scsi0), new RegExp(`vm-${newid}-disk-0`));
    }
    // Without the flag: the already-freed disk is a warning, the VM goes.
    assert.equal(await destroy(false), "WARNINGS: 1");
    assert.equal(sim.vm(newid), undefined);

    // With every storage online the flag is fine.
    sim.faults.offlineStorages = [];
    const second = await cloneAndWait(api, { name: "second" });
    const upid = await api.data(
      "DELETE",
      `/nodes/pve1/qemu/${second.newid}?purge=1&destroy-unreferenced-disks=1`,
    ) as string;
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    const r = await rawRequest(sim, "GET", `/nodes/pve1/qemu/${second.newid}/config`);
    assert.equal(r.status, 500);
  });
});

Deno.test("description codec: before 8.2 a %XX reads back unescaped; 8.2+ round-trips", async () => {
  const desc = "rate 50%41 off: café\nline two %25 %zz";
  for (
    const [version, want] of [
      ["8.1.4", "rate 50A off: café\nline two % %zz"],
      ["8.4.1", desc],
      ["9.0.3", desc],
    ] as const
  ) {
    await withSim(async (_sim, api) => {
      await api.data("PUT", "/nodes/pve1/qemu/9000/config", { json: { description: desc } });
      const c = await api.data("GET", "/nodes/pve1/qemu/9000/config") as Obj;
      assert.equal(c.description, want, version);
      const v = await api.data("GET", "/version") as Obj;
      assert.equal(v.version, version);
    }, { pveVersion: version });
  }
});

Deno.test("editVmOutOfBand: a stranger's clone held at lock: clone shows in config and resources", async () => {
  await withSim(async (sim, api) => {
    sim.addVm({ vmid: 700, name: "web-1", template: false });
    sim.editVmOutOfBand(700, (c) => {
      for (const k of Object.keys(c)) delete c[k];
      c.lock = "clone";
    });
    const c = await api.data("GET", "/nodes/pve1/qemu/700/config") as Obj;
    assert.deepEqual(Object.keys(c).sort(), ["digest", "lock"]);
    const res = await api.data("GET", "/cluster/resources?type=vm") as Obj[];
    assert.equal(res.find((e) => e.vmid === 700)?.lock, "clone");
    const put = await rawRequest(sim, "PUT", "/nodes/pve1/qemu/700/config", {
      body: JSON.stringify({ cores: 4 }),
      headers: { "Content-Type": "application/json" },
    });
    assert.equal(put.reason, "VM is locked (clone)");
  });
});
