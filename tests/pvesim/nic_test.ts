// Self-tests of NIC settings (nic.ts, startcheck.ts): a config PUT of
// `net0` with bridge, VLAN tag and MTU as qemu-server stores and checks it,
// and what a start then does with the bridge and the MTU.

import assert from "node:assert/strict";
import { type Api, cloneAndWait, rawRequest, withSim } from "./testkit.ts";

type Obj = Record<string, unknown>;
const FAST = { cloneMs: 30, cloneNamelessMs: 10, taskMs: 10 };
const MAC = /^virtio=BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2},/;

async function put(api: Api, vmid: number, body: Obj) {
  return await api.call("PUT", `/nodes/pve1/qemu/${vmid}/config`, { json: body });
}

async function start(api: Api, vmid: number): Promise<{ exit: unknown; log: string[] }> {
  const upid = await api.data("POST", `/nodes/pve1/qemu/${vmid}/status/start`) as string;
  const exit = (await api.waitTask(upid)).exitstatus;
  const lines = await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as Obj[];
  return { exit, log: lines.map((l) => String(l.t)) };
}

async function stop(api: Api, vmid: number): Promise<void> {
  const upid = await api.data("POST", `/nodes/pve1/qemu/${vmid}/status/stop`) as string;
  await api.waitTask(upid);
}

Deno.test("config net0: bridge, tag and MTU stored as PVE prints them; no macaddr means a new MAC", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    assert.equal(
      (await put(api, newid, { net0: "virtio,tag=20,bridge=vmbr1,mtu=1400" })).status,
      200,
    );
    const fresh = String(sim.vm(newid)!.config.net0);
    assert.match(fresh, MAC);
    assert.equal(fresh.replace(MAC, ""), "bridge=vmbr1,mtu=1400,tag=20");
    const kept = "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1";
    assert.equal((await put(api, newid, { net0: kept })).status, 200);
    assert.equal(sim.vm(newid)!.config.net0, kept);
    const bad = async (net0: string) => (await put(api, newid, { net0 })).body.errors?.net0;
    assert.equal(
      await bad("virtio,bridge=vmbr0,mtu=70000"),
      "invalid format - format error\nnet0.mtu: value must have a maximum value of 65520\n",
    );
    assert.equal(
      await bad("virtio,bridge=vmbr0,tag=0"),
      "invalid format - format error\nnet0.tag: value must have a minimum value of 1\n",
    );
    assert.equal(
      await bad("virtio,bridge=vmbr0,speed=10"),
      "invalid format - invalid key in comma-separated list property: speed\n",
    );
    assert.equal(sim.vm(newid)!.config.net0, kept, "a refused value changes nothing");
  }, { timing: FAST });
});

Deno.test("config net0 needs VM.Config.Network and SDN.Use on the new bridge or VLAN and on the old one", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const reason = async (net0: string) =>
      (await rawRequest(sim, "PUT", `/nodes/pve1/qemu/${newid}/config`, {
        body: JSON.stringify({ net0 }),
        headers: { "Content-Type": "application/json" },
      })).reason;
    const vms = { path: "/vms", privs: ["VM.Audit", "VM.Config.Options"], propagate: true };
    const zone = "/sdn/zones/localnetwork";
    sim.faults.acl = { entries: [vms, { path: zone, privs: ["SDN.Use"], propagate: true }] };
    assert.equal(
      await reason("virtio,bridge=vmbr0"),
      `Permission check failed (/vms/${newid}, VM.Config.Network)`,
    );
    vms.privs.push("VM.Config.Network");
    sim.faults.acl = {
      entries: [vms, { path: `${zone}/vmbr0`, privs: ["SDN.Use"] }, {
        path: `${zone}/vmbr1/30`,
        privs: ["SDN.Use"],
      }],
    };
    assert.equal(
      await reason("virtio,bridge=vmbr1,tag=20"),
      `Permission check failed (${zone}/vmbr1/20, SDN.Use)`,
    );
    assert.equal(await reason("virtio,bridge=vmbr1,tag=30"), "OK");
    // Back to vmbr0: allowed there, but the NIC it replaces (vmbr1, VLAN 30) is checked too.
    sim.faults.acl = { entries: [vms, { path: `${zone}/vmbr0`, privs: ["SDN.Use"] }] };
    assert.equal(
      await reason("virtio,bridge=vmbr0"),
      `Permission check failed (${zone}/vmbr1/30, SDN.Use)`,
    );
  }, { timing: FAST });
});

Deno.test("start: a bridge the node lacks fails the start (PVE 8 through QEMU, PVE 9 before it)", async () => {
  for (
    const [pveVersion, exit] of [["8.4.1", "start failed: QEMU exited with code 1"], [
      "9.0.3",
      "bridge 'vmbr9' does not exist",
    ]]
  ) {
    await withSim(async (sim, api) => {
      const { newid } = await cloneAndWait(api);
      await put(api, newid, { net0: "virtio,bridge=vmbr9" });
      const r = await start(api, newid);
      assert.equal(r.exit, exit, pveVersion);
      if (pveVersion.startsWith("8")) {
        assert.ok(r.log.includes("bridge 'vmbr9' does not exist"), r.log.join("\n"));
        assert.ok(
          r.log.some((l) =>
            l.endsWith("network script /var/lib/qemu-server/pve-bridge failed with status 512")
          ),
        );
      }
      assert.equal(sim.vm(newid)!.status, "stopped");
      // A bridge the node has (here an SDN vnet) starts.
      await put(api, newid, { net0: "virtio,bridge=vnet1" });
      assert.equal((await start(api, newid)).exit, "OK");
    }, {
      timing: FAST,
      pveVersion,
      acl: {
        entries: [{
          path: "/",
          privs: [
            "VM.Audit",
            "VM.Config.Network",
            "VM.PowerMgmt",
            "VM.Clone",
            "VM.Allocate",
            "Datastore.AllocateSpace",
            "SDN.Use",
          ],
          propagate: true,
        }],
        vnetZones: { vnet1: "zone1" },
      },
    });
  }
});

Deno.test("start: a virtio NIC's MTU must lie between 576 and the bridge's MTU (1 = the bridge's)", async () => {
  await withSim(async (_sim, api) => {
    const { newid } = await cloneAndWait(api);
    const tryMtu = async (net0: string) => {
      await put(api, newid, { net0 });
      return (await start(api, newid)).exit;
    };
    assert.equal(
      await tryMtu("virtio,bridge=vmbr0,mtu=9000"),
      "netdev net0: MTU '9000' is bigger than the bridge MTU '1500'",
    );
    assert.equal(
      await tryMtu("virtio,bridge=vmbr0,mtu=500"),
      "netdev net0: MTU '500' is smaller than the IP minimum MTU '576'",
    );
    assert.equal(await tryMtu("virtio,bridge=jumbo,mtu=9000"), "OK");
    await stop(api, newid);
    assert.equal(await tryMtu("virtio,bridge=vmbr0,mtu=1"), "OK");
  }, { timing: FAST, bridges: { vmbr0: 1500, jumbo: 9000 } });
});

Deno.test("start: MTU on a non-virtio NIC is only warned about", async () => {
  await withSim(async (_sim, api) => {
    const { newid } = await cloneAndWait(api);
    await put(api, newid, { net0: "e1000,bridge=vmbr0,mtu=9000" });
    const r = await start(api, newid);
    assert.equal(r.exit, "OK");
    assert.ok(
      r.log.includes(
        "WARN: netdev net0: ignoring MTU '9000', not using VirtIO or no bridge configured.",
      ),
    );
  }, { timing: FAST });
});
