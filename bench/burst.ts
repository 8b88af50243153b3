// A burst of 48 Creates over 3 nodes against the Proxmox simulator, with
// pvedaemon's 3 workers per node, pveproxy's 30 s proxy timeout, storage
// locks, a 10 s clone and a 20 s agent boot (docs/proxmox-notes.md "pvedaemon's
// three workers", "Storage locks"), all time-scaled by --scale. The real
// backend runs in this process under the real kit (startKit, memory store);
// meanwhile an operator issues a protected GET every (scaled) second on each
// node. Prints one Markdown row (bench/RESULTS.md "Create burst"); times
// are given back in real seconds (divided by the scale).
//
//   deno run --allow-all bench/burst.ts [--scale 0.2] [--calls-per-node 2]
//     [--clones-per-storage 2] [--agent-poll-ms 3000] [--label TEXT]

import { parseArgs } from "node:util";
import { builtinCatalog } from "../src/config/catalog.ts";
import type { Slot } from "../src/kit/model.ts";
import { startKit } from "../src/kit/kit.ts";
import { STATE_NAMES } from "../src/kit/model.ts";
import { createMemoryStore } from "../src/kit/store.ts";
import { createProxmoxBackend, type Timing } from "../src/proxmox/mod.ts";
import { DEFAULT_TIMING } from "../src/proxmox/timing.ts";
import { REAL_TIMING, startSimulator } from "../tests/pvesim/mod.ts";
import { configFor } from "../tests/proxmox/helpers.ts";

const { values: o } = parseArgs({
  options: {
    scale: { type: "string", default: "0.2" },
    "calls-per-node": { type: "string", default: "2" },
    "clones-per-storage": { type: "string", default: "2" },
    "agent-poll-ms": { type: "string", default: String(DEFAULT_TIMING.agentPollMs) },
    label: { type: "string", default: "this provider" },
  },
});
const scale = Number(o.scale);
const NODES = ["pve1", "pve2", "pve3"];
const PER_NODE = 16;

/** The model, in real milliseconds (scaled below). */
const MODEL = {
  ...REAL_TIMING,
  // A 10 s clone task: 1 s allocating its disk under the storage's lock (a
  // busy LVM-thin pool: 16 parallel clones of one node would queue 16 s on
  // it, and those waiting over 10 s fail), then 9 s copying.
  storageAllocMs: 1_000,
  cloneMs: 9_000,
  cloneNamelessMs: 7_000,
  agentBootMs: 20_000,
};
const simTiming = Object.fromEntries(
  Object.entries(MODEL).map(([k, v]) => [k, Math.round(v * scale)]),
) as typeof MODEL;

const sim = await startSimulator({
  nodes: NODES,
  timing: simTiming,
  templates: NODES.map((node, i) => ({
    vmid: 9001 + i,
    node,
    name: `tmpl-${node}`,
    agent: "1",
    sharedStorage: false,
  })),
  lxc: [],
});

const s = (ms: number) => Math.max(1, Math.round(ms * scale));
const timing: Timing = {
  ...DEFAULT_TIMING,
  task: { initialMs: s(DEFAULT_TIMING.task.initialMs), maxMs: s(DEFAULT_TIMING.task.maxMs) },
  exec: { initialMs: s(DEFAULT_TIMING.exec.initialMs), maxMs: s(DEFAULT_TIMING.exec.maxMs) },
  agentPollMs: s(Number(o["agent-poll-ms"])),
  agentFirstPollMs: s(DEFAULT_TIMING.agentFirstPollMs),
  agentTimeoutMs: s(DEFAULT_TIMING.agentTimeoutMs),
  settleMs: s(DEFAULT_TIMING.settleMs),
  requestTimeoutMs: s(DEFAULT_TIMING.requestTimeoutMs),
  retryBaseMs: s(DEFAULT_TIMING.retryBaseMs),
  cloneSettleMs: s(DEFAULT_TIMING.cloneSettleMs),
};
const perZone = new Map(NODES.map((n, i) => [n, 9001 + i]));
const cfg = configFor(sim, {
  nodes: NODES,
  callsPerNode: Number(o["calls-per-node"]),
  clonesPerStorage: Number(o["clones-per-storage"]),
}, { catalog: builtinCatalog({ kind: "per-zone", vmids: perZone }) });
const backend = await createProxmoxBackend(cfg, { timing });

const slots: Slot[] = NODES.flatMap((zone) =>
  Array.from({ length: PER_NODE }, (_, i) => ({
    id: `proxmox/OnDemand/pve.small/${zone}/${String(i).padStart(3, "0")}`,
    instanceType: "pve.small",
    zone,
    pricePerHour: 0.01,
    resources: [["cpu", "2"], ["memory", "4Gi"]],
    allocatable: [["cpu", "2"], ["memory", "4Gi"]],
    labels: [],
  }))
);
const kit = await startKit({ provider: "proxmox", backend, store: createMemoryStore(), slots });

// The operator: a protected GET on each node every second (scaled).
const client = Deno.createHttpClient({ caCerts: [sim.caPem] });
let operating = true;
const operator = Promise.all(NODES.map(async (node, i) => {
  while (operating) {
    const path = `/nodes/${node}/qemu/${9001 + i}/status/current`;
    const r = await fetch(`${sim.url}${path}`, {
      headers: { Authorization: sim.authHeader },
      client,
    });
    await r.body?.cancel();
    await new Promise((f) => setTimeout(f, s(1000)));
  }
}));

const token = { shardId: "", epoch: 0n, seq: 0n };
const t0 = performance.now();
await Promise.all(slots.map((slot) => kit.create({ machineId: slot.id, token })));
const done = new Map<string, number>();
const states = new Map<string, string>();
while (done.size < slots.length) {
  for (const slot of slots) {
    if (done.has(slot.id)) continue;
    const state = STATE_NAMES[(await kit.get(slot.id)).state];
    if (state !== "CREATING") {
      done.set(slot.id, performance.now() - t0);
      states.set(slot.id, state);
    }
  }
  await new Promise((f) => setTimeout(f, 20));
}
operating = false;
await operator;

const lastMs = Math.max(...done.values());
const idle = [...states.values()].filter((st) => st === "IDLE").length;
const p596 = sim.requests.filter((q) => q.status === 596).length;
const opWaits = sim.requests
  .filter((q) => /^\/nodes\/pve\d\/qemu\/900\d\/status\/current$/.test(q.path))
  .map((q) => q.workerWaitMs ?? 0)
  .sort((a, b) => a - b);
const lockFails = sim.tasks().filter((t) => t.type === "qmclone" && t.exitstatus !== "OK").length;
const pools = sim.workerPools();
const peak = Math.max(...NODES.map((n) => pools[n].peakBusy));
const longestWait = Math.max(...NODES.map((n) => pools[n].maxWaitMs));
// The floor of the model (bench/RESULTS.md "Create burst"): per node,
// ⌈16 / bound⌉ clone rounds one after the other, each a POST until its fork
// plus a 10 s clone task; a second lane starts one allocation later (the
// storage lock serialises allocations); then the last VM's start task and boot.
const bound = 2; // the default --proxmox-clones-per-storage, whatever this run uses
const cloneTask = MODEL.storageAllocMs + MODEL.cloneMs;
const floorMs = Math.ceil(PER_NODE / bound) * (MODEL.cloneForkMs + cloneTask) +
  (bound > 1 ? MODEL.storageAllocMs : 0) + MODEL.taskMs + MODEL.agentBootMs;
const real = (ms: number) => (ms / scale / 1000).toFixed(1);
const errors = [...new Set([...states].filter(([, st]) => st !== "IDLE").map(([id]) => id))];
const firstError = errors.length > 0 ? (await kit.get(errors[0])).lastError : "";

console.log(
  `| ${o.label} | ${idle} / ${slots.length} | ${p596} | ${lockFails} | ${real(lastMs)} s | ${
    (floorMs / 1000).toFixed(1)
  } s | ${(lastMs / scale / floorMs).toFixed(2)} | ${real(opWaits.at(-1) ?? 0)} s | ${
    real(longestWait)
  } s | ${peak} / 3 |`,
);
if (firstError) console.log(`first failure: ${firstError.slice(0, 300)}`);

await kit.close();
await backend.close();
client.close();
await sim.close();
