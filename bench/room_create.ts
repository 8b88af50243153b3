// What the node-capacity check costs a Create at 20,000 machines
// (bench/RESULTS.md "Node capacity"). The real backend in this process
// against the Proxmox simulator holding 20,000 running VMs over 4 nodes:
// sequential Creates (admission, as the kit asks it, then Create), each
// timed from admission to its host ref, and every API call the simulator
// saw during it, by method and path (ids taken out). The same script run
// from a checkout without the check (it has no `admit`) is the baseline:
//
//   deno run --allow-all bench/room_create.ts [--vms 20000] [--creates 30] [--label TEXT]
//
// It also times the room's own work on a listing of that size (what a
// Create adds: one admission, one count of its adoption search's listing,
// one check before the clone), in isolation.

import { parseArgs } from "node:util";
import type { SlotSpec } from "../src/kit/backend.ts";
import { createProxmoxBackend } from "../src/proxmox/mod.ts";
import { startSimulator } from "../tests/pvesim/mod.ts";
import { configFor, FAST } from "../tests/proxmox/helpers.ts";

const { values: o } = parseArgs({
  options: {
    vms: { type: "string", default: "20000" },
    creates: { type: "string", default: "30" },
    label: { type: "string", default: "this checkout" },
  },
});
const VMS = Number(o.vms);
const CREATES = Number(o.creates);
const NODES = ["pve1", "pve2", "pve3", "pve4"];
// Nodes that hold the whole fleet: the cost is under test, not a refusal.
const BIG = { memoryMib: 64 * 1024 * 1024, cpus: 4096 };

const sim = await startSimulator({
  nodes: NODES,
  nodeResources: Object.fromEntries(NODES.map((n) => [n, BIG])),
  timing: { cloneMs: 120, cloneNamelessMs: 40, taskMs: 20, agentBootMs: 80, resourcesLagMs: 60 },
});
for (let i = 0; i < VMS; i++) {
  sim.addVm({
    vmid: 100_000 + i,
    node: NODES[i % NODES.length],
    name: `bigfleet-fleet-${i}`,
    tags: "bigfleet",
    template: false,
    running: true,
    memory: 2048,
  });
}
const cfg = configFor(sim, { nodes: NODES }, {
  offerings: NODES.map((zone) => ({
    instanceType: "pve.small",
    zone,
    count: CREATES,
    resources: [],
    labels: [],
  })),
});
const backend = await createProxmoxBackend(cfg, { timing: FAST });
const admit = (backend as { admit?: (s: Omit<SlotSpec, "operationId">) => string | null }).admit;

const times: number[] = [];
const calls = new Map<string, number>();
for (let i = 0; i < CREATES; i++) {
  const zone = NODES[i % NODES.length];
  const slot: SlotSpec = {
    machineId: `bench/OnDemand/pve.small/${zone}/${String(i).padStart(3, "0")}`,
    operationId: `op-${i}`,
    instanceType: "pve.small",
    zone,
  };
  const before = sim.requests.length;
  const t0 = performance.now();
  const refused = admit?.call(backend, slot) ?? null;
  if (refused !== null) throw new Error(refused);
  await backend.create(slot, AbortSignal.timeout(60_000));
  times.push(performance.now() - t0);
  for (const q of sim.requests.slice(before)) {
    const path = q.path.replace(/^\/nodes\/[^/]+/, "/nodes/{node}")
      .replace(/\/\d+(?=\/|$)/g, "/{vmid}").replace(/UPID:[^/]+/, "{upid}");
    const key = `${q.method} ${path}`;
    calls.set(key, (calls.get(key) ?? 0) + 1);
  }
}
await backend.close();
await sim.close();

times.sort((a, b) => a - b);
const q = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
const perCreate = [...calls].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
  .map(([k, n]) => `${k} ×${Number((n / CREATES).toFixed(2))}`);
console.log(
  `| ${o.label} | ${VMS} | ${CREATES} | ${q(0.5).toFixed(0)} | ${q(0.9).toFixed(0)} | ` +
    `${(times.reduce((a, b) => a + b, 0) / CREATES).toFixed(0)} | ` +
    `${[...calls.values()].reduce((a, b) => a + b, 0) / CREATES} |`,
);
console.log(`calls per Create: ${perCreate.join(", ")}`);

// The room's own work at this size, in isolation (absent from a checkout without it).
const roomModule = "../src/proxmox/room/room.ts";
try {
  const { createRoom } = await import(roomModule);
  const { roomPolicy } = await import("../src/config/room.ts");
  const { BackendMemory } = await import("../src/proxmox/memory.ts");
  const { nodeStatesOf } = await import("../src/proxmox/room/counted.ts");
  const room = createRoom({
    policy: roomPolicy({}, NODES),
    catalog: cfg.catalog,
    offered: new Map(NODES.map((n) => [n, ["pve.small"]])),
    memory: new BackendMemory(),
    settleMs: 15_000,
    refreshMs: 5_000,
  });
  const guests = Array.from({ length: VMS }, (_, i) => ({
    vmid: 100_000 + i,
    node: NODES[i % NODES.length],
    status: "running",
    name: `bigfleet-fleet-${i}`,
    tags: "bigfleet",
    template: 0,
    maxmem: 2048 * 1024 * 1024,
    maxcpu: 2,
  }));
  const nodes = nodeStatesOf(
    NODES.map((node) => ({
      node,
      status: "online",
      maxmem: BIG.memoryMib * 2 ** 20,
      maxcpu: 4096,
    })),
  );
  const small = cfg.catalog.get("pve.small");
  const median = (fn: (i: number) => void, n: number) => {
    const ts: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      fn(i);
      ts.push(performance.now() - t);
    }
    return ts.sort((a, b) => a - b)[Math.floor(n / 2)];
  };
  const observe = median((i) => room.observe({ requestedAt: Date.now() + i, nodes, guests }), 50);
  const text = JSON.stringify({ data: guests });
  const parse = median(() => JSON.parse(text), 50);
  // 1,000 Creates in flight: each admission holds its type's room until its Create ends.
  for (let i = 0; i < 1000; i++) room.admit(`held-${i}`, small, NODES[i % NODES.length]);
  const admitUs = median((i) => {
    room.admit(`m-${i}`, small, NODES[i % NODES.length]);
    room.createEnded(`m-${i}`);
  }, 10_000) * 1000;
  const recheckUs = median((i) => room.recheck(`m-${i}`, small, NODES[i % NODES.length]), 10_000) *
    1000;
  console.log(
    `room at ${VMS} guests: count of a listing ${observe.toFixed(2)} ms (parsing that listing's ` +
      `JSON alone: ${parse.toFixed(2)} ms); admission ${admitUs.toFixed(1)} µs and check before ` +
      `the clone ${recheckUs.toFixed(1)} µs with 1,000 Creates in flight`,
  );
} catch (err) {
  if (!(err instanceof TypeError) || !String(err.message).includes(roomModule.slice(3))) throw err;
  console.log("(no room in this checkout)");
}
