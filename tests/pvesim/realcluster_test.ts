// Self-tests of the real-cluster behaviours: offline storages under destroy,
// offline nodes behind pveproxy, SDN.Use ACLs with propagation, the
// description codec of older pve-common, and out-of-band config edits.

import assert from "node:assert/strict";
import { hasPriv, vnetPaths } from "./acl.ts";
import { cloneAndWait, rawRequest, withSim } from "./testkit.ts";
import type { SimAcl, SimAclEntry } from "./types.ts";

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
    // Without the flag: the already-freed disk is only logged (as PVE 8.4 does), the VM goes.
    assert.equal(await destroy(false), "OK");
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

Deno.test("offline node: per-node routes 595 with an empty body; listings say offline/unknown", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "on-pve2", target: "pve2" });
    sim.faults.offlineNodes = ["pve2"];
    for (
      const path of [
        `/nodes/pve2/qemu/${newid}/config`,
        "/nodes/pve2/status",
        "/nodes/pve2/bogus/route", // proxied before the target could say 501
      ]
    ) {
      const r = await rawRequest(sim, "GET", path);
      assert.deepEqual([r.status, r.reason, r.body], [595, "No route to host", ""], path);
    }
    // The node we talk to still answers its own and the cluster-wide routes.
    assert.equal((await rawRequest(sim, "GET", "/nodes/pve1/status")).status, 200);
    const nodes = await api.data("GET", "/nodes") as Obj[];
    assert.deepEqual(nodes.map((n) => [n.node, n.status]), [["pve1", "online"], [
      "pve2",
      "offline",
    ]]);
    const status = await api.data("GET", "/cluster/status") as Obj[];
    assert.equal(status.find((n) => n.name === "pve2")?.online, 0);
    const res = await api.data("GET", "/cluster/resources") as Obj[];
    const vm = res.find((e) => e.vmid === newid)!;
    assert.equal(vm.status, "unknown");
    assert.equal(vm.node, "pve2");
    assert.equal("name" in vm, false, "no RRD data from a node that is down");
    assert.equal(res.find((e) => e.id === "node/pve2")?.status, "offline");
    // A slow death: the proxy gives up after its timeout with 596.
    sim.faults.offlineReply = { status: 596, reason: "Connection timed out", delayMs: 50 };
    const slow = await rawRequest(sim, "GET", `/nodes/pve2/qemu/${newid}/status/current`);
    assert.deepEqual([slow.status, slow.reason], [596, "Connection timed out"]);
    // Back online: everything as before.
    sim.faults.offlineNodes = [];
    const back = await api.data("GET", `/nodes/pve2/qemu/${newid}/config`) as Obj;
    assert.equal(back.name, "on-pve2");
  });
});

Deno.test("ACL model: exact path, propagation, deeper grants override, token ∩ user", () => {
  const use = ["SDN.Use"];
  const acl = (entries: SimAclEntry[]): SimAcl => ({ entries });
  const bridge = "/sdn/zones/localnetwork/vmbr0";
  // propagate=0 on the bridge: the bridge only, not its VLANs.
  let a = acl([{ path: bridge, privs: use }]);
  assert.equal(hasPriv(a, bridge, "SDN.Use"), true);
  assert.equal(hasPriv(a, `${bridge}/100`, "SDN.Use"), false);
  // propagate=1 covers every VLAN below it.
  a = acl([{ path: bridge, privs: use, propagate: true }]);
  assert.equal(hasPriv(a, `${bridge}/100`, "SDN.Use"), true);
  // A deeper grant replaces the inherited one.
  a = acl([
    { path: "/sdn", privs: use, propagate: true },
    { path: `${bridge}/100`, privs: ["SDN.Audit"] },
  ]);
  assert.equal(hasPriv(a, `${bridge}/100`, "SDN.Use"), false);
  assert.equal(hasPriv(a, `${bridge}/200`, "SDN.Use"), true);
  // A privilege-separated token needs the grant on itself and on its user.
  a = acl([
    { path: bridge, privs: use, propagate: true, ugid: "token" },
    { path: bridge, privs: use, propagate: false, ugid: "user" },
  ]);
  assert.equal(hasPriv(a, bridge, "SDN.Use"), true);
  assert.equal(hasPriv(a, `${bridge}/100`, "SDN.Use"), false);
  // The paths check_vnet_access asks for.
  assert.deepEqual(vnetPaths("virtio=BC:24:11:00:00:01,bridge=vmbr0"), [bridge]);
  assert.deepEqual(vnetPaths("virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=100"), [`${bridge}/100`]);
  assert.deepEqual(vnetPaths("e1000=x,bridge=vmbr1,trunks=10;20-21"), [
    "/sdn/zones/localnetwork/vmbr1/10",
    "/sdn/zones/localnetwork/vmbr1/20",
    "/sdn/zones/localnetwork/vmbr1/21",
  ]);
  assert.deepEqual(vnetPaths("virtio=x,bridge=vnet7", { vnet7: "zone1" }), [
    "/sdn/zones/zone1/vnet7",
  ]);
});

Deno.test("clone checks SDN.Use on the template's NICs before forking (403, nothing cloned)", async () => {
  await withSim(async (sim, api) => {
    sim.editVmOutOfBand(9000, (c) => {
      c.net0 = `${c.net0},tag=100`;
    });
    sim.faults.acl = {
      entries: [
        { path: "/sdn/zones/localnetwork/vmbr0", privs: ["SDN.Use"], propagate: false },
        // What clone needs besides: the template, the new VMID, the disk's storage.
        { path: "/vms/9000", privs: ["VM.Clone", "VM.Audit"] },
        { path: "/vms", privs: ["VM.Allocate", "VM.Audit"], propagate: true },
        { path: "/storage/ceph-vm", privs: ["Datastore.AllocateSpace"] },
      ],
    };
    const r = await rawRequest(sim, "POST", "/nodes/pve1/qemu/9000/clone", {
      body: JSON.stringify({ newid: 120, full: 1 }),
      headers: { "Content-Type": "application/json" },
    });
    assert.deepEqual(
      [r.status, r.reason],
      [403, "Permission check failed (/sdn/zones/localnetwork/vmbr0/100, SDN.Use)"],
    );
    assert.equal(sim.vm(120), undefined);
    assert.equal(sim.tasks().length, 0, "refused before the fork");
    sim.faults.acl.entries[0].propagate = true;
    const { status } = await cloneAndWait(api, { name: "tagged" });
    assert.equal(status.exitstatus, "OK");
  });
});
