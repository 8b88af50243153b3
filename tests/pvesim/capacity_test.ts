// Self-tests of node capacity (capacity.ts) and what refuses a start
// (startcheck.ts): node memory and CPUs in node status and resources,
// running guests counted whole, foreign load, and the real PVE 8.4 node of
// issue 26 (24,105 MiB): a 25,129 MiB guest is refused by QEMU, a guest
// needing half the node starts although a foreign guest holds 60%.

import assert from "node:assert/strict";
import { type Api, cloneAndWait, until, withSim } from "./testkit.ts";
import { pvesimCommand, spawnStandalone } from "./standalone.ts";
import { cli, lines } from "../cli/helpers.ts";

type Obj = Record<string, unknown>;
const MIB = 1024 * 1024;
const FAST = { cloneMs: 30, cloneNamelessMs: 10, taskMs: 10, resourcesLagMs: 50 };
const NODE = { pve1: { memoryMib: 24105, cpus: 8 } };

async function nodeStatus(api: Api, node = "pve1"): Promise<Obj> {
  return await api.data("GET", `/nodes/${node}/status`) as Obj;
}

async function resourceNode(api: Api, node = "pve1"): Promise<Obj> {
  const all = await api.data("GET", "/cluster/resources?type=node") as Obj[];
  return all.find((e) => e.node === node)!;
}

/** Clones the template, sizes it, starts it; the start task's status and log. */
async function sizedStart(
  api: Api,
  size: Obj,
): Promise<{ newid: number; status: Obj; log: string[] }> {
  const { newid } = await cloneAndWait(api);
  await api.data("PUT", `/nodes/pve1/qemu/${newid}/config`, { json: size });
  const upid = await api.data("POST", `/nodes/pve1/qemu/${newid}/status/start`) as string;
  const status = await api.waitTask(upid);
  const lines = await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as Obj[];
  return { newid, status, log: lines.map((l) => String(l.t)) };
}

Deno.test("node status: memory, cpuinfo and swap of the node; defaults 512 GiB / 64 CPUs", async () => {
  await withSim(async (_sim, api) => {
    const s = await nodeStatus(api);
    assert.deepEqual(s.memory, {
      total: 24105 * MIB,
      used: 2048 * MIB,
      free: (24105 - 2048) * MIB,
    });
    assert.equal((s.cpuinfo as Obj).cpus, 8);
    assert.deepEqual(s.swap, { total: 1024 * MIB, used: 0, free: 1024 * MIB });
    assert.equal(typeof s.cpu, "number");
    assert.ok(typeof s.uptime === "number" && typeof s.pveversion === "string");
    const other = await nodeStatus(api, "pve2");
    assert.equal((other.memory as Obj).total, 524288 * MIB);
    assert.equal((other.cpuinfo as Obj).cpus, 64);
    const entry = await resourceNode(api);
    assert.deepEqual([entry.maxmem, entry.mem, entry.maxcpu], [24105 * MIB, 2048 * MIB, 8]);
    assert.equal(entry.status, "online");
  }, { nodeResources: { pve1: { ...NODE.pve1, swapMib: 1024 } } });
});

Deno.test("running guests hold their configured memory on their node; stopped ones nothing", async () => {
  await withSim(async (sim, api) => {
    // A foreign guest holding 60% of the node, running; another one stopped.
    sim.addVm({ vmid: 500, name: "foreign", template: false, running: true, memory: 14463 });
    sim.addVm({ vmid: 501, name: "idle", template: false, memory: 4096 });
    const used = () => nodeStatus(api).then((s) => (s.memory as Obj).used);
    assert.equal(await used(), (2048 + 14463) * MIB);
    // The host's own use moves too.
    sim.setNodeLoad("pve1", { hostUsedMib: 4096 });
    assert.equal(await used(), (4096 + 14463) * MIB);
    sim.stopVmOutOfBand(500);
    assert.equal(await used(), 4096 * MIB);
    // /cluster/resources follows once pvestatd saw the stop.
    await until(async () => (await resourceNode(api)).mem === 4096 * MIB);
    const vm = (await api.data("GET", "/cluster/resources?type=vm") as Obj[])
      .find((e) => e.vmid === 501)!;
    assert.deepEqual([vm.maxmem, vm.mem, vm.maxdisk], [4096 * MIB, 0, 20 * 1024 * MIB]);
  }, { nodeResources: NODE, timing: FAST });
});

Deno.test("start: a guest larger than the node's memory is refused by QEMU; half the node starts though 60% is taken", async () => {
  await withSim(async (sim, api) => {
    // Seen on a real PVE 8.4 node with 24,105 MiB: the task ends like this.
    const big = await sizedStart(api, { memory: 25129 });
    assert.equal(big.status.exitstatus, "start failed: QEMU exited with code 1");
    assert.ok(
      big.log.includes("kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory"),
      big.log.join("\n"),
    );
    assert.equal(sim.vm(big.newid)!.status, "stopped");
    // A foreign guest holds 60% of the node; a guest of half the node still starts.
    sim.addVm({ vmid: 500, name: "foreign", template: false, running: true, memory: 14463 });
    const half = await sizedStart(api, { memory: 12052 });
    assert.equal(half.status.exitstatus, "OK");
    assert.equal(sim.vm(half.newid)!.status, "running");
    // The node is now overcommitted: used reports all of it, never more.
    const mem = (await nodeStatus(api)).memory as Obj;
    assert.deepEqual([mem.used, mem.free], [24105 * MIB, 0]);
  }, { nodeResources: NODE, timing: FAST });
});

Deno.test("start: swap counts towards what one guest may map; vCPUs beyond the node's are refused", async () => {
  await withSim(async (_sim, api) => {
    const swapped = await sizedStart(api, { memory: 25129 });
    assert.equal(swapped.status.exitstatus, "OK");
    const wide = await sizedStart(api, { cores: 12, memory: 1024 });
    assert.equal(wide.status.exitstatus, "MAX 8 vcpus allowed per VM on this node");
  }, { nodeResources: { pve1: { ...NODE.pve1, swapMib: 2048 } }, timing: FAST });
});

Deno.test("vCPUs reported: sockets × cores capped at the node's CPUs, vcpus when set", async () => {
  await withSim(async (_sim, api) => {
    const cpus = async (vmid: number) => {
      const all = await api.data("GET", "/cluster/resources?type=vm") as Obj[];
      const current = await api.data("GET", `/nodes/pve1/qemu/${vmid}/status/current`) as Obj;
      return [all.find((e) => e.vmid === vmid)!.maxcpu, current.cpus];
    };
    assert.deepEqual(await cpus(600), [8, 8]);
    assert.deepEqual(await cpus(601), [3, 3]);
  }, {
    nodeResources: NODE,
    timing: FAST,
    templates: [
      { vmid: 600, name: "wide", template: false, cores: 8, config: { sockets: 2 } },
      { vmid: 601, name: "capped", template: false, cores: 8, config: { sockets: 2, vcpus: 3 } },
    ],
  });
});

Deno.test("pvesim --node-memory / --node-cpus set every node's resources; a bad value exits 2", async () => {
  const sim = await spawnStandalone(["--port=0", "--node-memory=24105", "--node-cpus=8"]);
  const field = (label: string) => new RegExp(`^${label} +(.+)$`, "m").exec(sim.out)![1];
  const client = Deno.createHttpClient({
    caCerts: [await Deno.readTextFile(field("CA file:"))],
  });
  try {
    const url = field("pvesim listening on");
    const auth = `PVEAPIToken=${field("token id:")}=${field("token secret:")}`;
    const r = await fetch(`${url}/nodes/pve2/status`, { headers: { Authorization: auth }, client });
    const s = (await r.json()).data as Obj;
    assert.equal((s.memory as Obj).total, 24105 * MIB);
    assert.equal((s.cpuinfo as Obj).cpus, 8);
  } finally {
    client.close();
    sim.child.kill("SIGTERM");
    await sim.child.status;
  }
  const bad = await cli(["--node-memory=lots"], { cmd: pvesimCommand(), timeoutMs: 20_000 });
  assert.equal(bad.code, 2);
  assert.deepEqual(lines(bad.stderr), ['error: --node-memory: want a number >= 0, got "lots"']);
});

Deno.test("node figures need Sys.Audit on /nodes/<node>: without it /nodes and resources list status only", async () => {
  await withSim(async (sim, api) => {
    const listed = async (path: string) =>
      ((await api.data("GET", path)) as Obj[]).find((e) => e.node === "pve1")!;
    sim.faults.acl = { entries: [{ path: "/vms", privs: ["VM.Audit"], propagate: true }] };
    for (const path of ["/nodes", "/cluster/resources?type=node"]) {
      const e = await listed(path);
      assert.equal(e.status, "online", path);
      for (const k of ["maxmem", "mem", "maxcpu", "cpu", "uptime"]) {
        assert.ok(!(k in e), `${path} ${k}`);
      }
    }
    sim.faults.acl.entries.push({ path: "/nodes", privs: ["Sys.Audit"], propagate: true });
    for (const path of ["/nodes", "/cluster/resources?type=node"]) {
      const e = await listed(path);
      assert.deepEqual([e.maxmem, e.maxcpu], [24105 * MIB, 8], path);
    }
  }, { nodeResources: NODE });
});

Deno.test("resources: an HA-managed guest carries hastate, without lag; others none", async () => {
  await withSim(async (sim, api) => {
    sim.addVm({ vmid: 510, name: "ha-guest", template: false, memory: 2048, hastate: "started" });
    sim.addVm({ vmid: 511, name: "plain", template: false, memory: 2048 });
    const all = await api.data("GET", "/cluster/resources?type=vm") as Obj[];
    assert.equal(all.find((e) => e.vmid === 510)!.hastate, "started");
    assert.ok(!("hastate" in all.find((e) => e.vmid === 511)!));
  });
});
