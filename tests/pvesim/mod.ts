// Proxmox VE REST API simulator for tests: startSimulator() serves a
// faithful subset of /api2/json over HTTPS (see README.md).

import { BUILTIN_READY_EXEC } from "../../src/proxmox/vm/ready.ts";
import { makeTestPki } from "./certs.ts";
import { defaultFaults } from "./faults.ts";
import type { Route, SimCore } from "./router.ts";
import { accessRoutes } from "./routes/access.ts";
import { agentInfoRoutes } from "./routes/agentinfo.ts";
import { userConfigRoutes } from "./routes/userconfig.ts";
import { cutNode, rejoinNode } from "./multinode.ts";
import { qemuServerFor } from "./versions.ts";
import { agentRoutes } from "./routes/agent.ts";
import { cloneRoutes } from "./routes/clone.ts";
import { clusterRoutes } from "./routes/cluster.ts";
import { nodeRoutes } from "./routes/nodes.ts";
import { qemuRoutes } from "./routes/qemu.ts";
import { resizeRoutes } from "./routes/resize.ts";
import { storageRoutes } from "./routes/storage.ts";
import { WorkerPool } from "./daemon.ts";
import { configLock, storageLock, takeLock } from "./locks.ts";
import { SimServer } from "./server.ts";
import { configureNodes, setNodeLoad } from "./capacity.ts";
import { ClusterState } from "./state.ts";
import { DEFAULT_STORAGES } from "./storage.ts";
import { TaskRegistry, Timers } from "./tasks.ts";
import type { SimOptions, SimRequestLog, SimTiming, Simulator } from "./types.ts";

export type * from "./types.ts";
export type * from "./captypes.ts";
export type * from "./types_cluster.ts";
export { issueCert, makeCa, makeTestPki, pemFingerprint } from "./certs.ts";
export { RHEL10_GUEST } from "./guestcaps.ts";

export const DEFAULT_TIMING: SimTiming = {
  cloneMs: 300,
  cloneNamelessMs: 100,
  taskMs: 50,
  agentBootMs: 200,
  resourcesLagMs: 100,
  execMs: 50,
  lockTimeoutMs: 200,
  daemonCallMs: 0,
  cloneForkMs: 0,
  qgaPingTimeoutMs: 20,
  qgaRoundTripMs: 0,
  fileWriteMsPerKiB: 0,
  proxyTimeoutMs: 30_000,
  storageAllocMs: 0,
  storageLockTimeoutMs: 10_000,
  noRouteMs: 5,
  statusStaleMs: 3_000,
  rejoinUnknownMs: 100,
  statusCacheMs: 20,
};

/**
 * Durations of a real cluster (ms): a full clone of a 32 GiB disk between
 * LVM-thin volumes takes minutes, almost all of it the first disk copy during
 * which the clone has no name; pvestatd publishes every 10 s; a guest boots
 * its agent in tens of seconds. The pvedaemon figures were measured on the
 * single-node rig (docs/proxmox-notes.md "pvedaemon's three workers"); the
 * storage allocation of a qcow2 on a dir storage took ~200 ms there, an
 * lvcreate on a busy thin pool takes seconds. Scale with scaledTiming for tests.
 */
export const REAL_TIMING: SimTiming = {
  cloneMs: 180_000,
  cloneNamelessMs: 170_000,
  taskMs: 1_500,
  agentBootMs: 25_000,
  resourcesLagMs: 10_000,
  execMs: 2_000,
  lockTimeoutMs: 1_000,
  daemonCallMs: 25,
  cloneForkMs: 200,
  qgaPingTimeoutMs: 3_000,
  qgaRoundTripMs: 65,
  fileWriteMsPerKiB: 1,
  proxyTimeoutMs: 30_000,
  storageAllocMs: 200,
  storageLockTimeoutMs: 10_000,
  noRouteMs: 3_000,
  statusStaleMs: 300_000,
  rejoinUnknownMs: 10_000,
  statusCacheMs: 2_000,
};

/** Every duration of `t` multiplied by `factor` (e.g. 1/1000: a 3 minute clone takes 180 ms). */
export function scaledTiming(factor: number, t: SimTiming = REAL_TIMING): SimTiming {
  const out = { ...t };
  for (const k of Object.keys(out) as (keyof SimTiming)[]) out[k] = Math.round(t[k] * factor);
  return out;
}

const ROUTES: Route[] = [
  ...clusterRoutes,
  ...nodeRoutes,
  ...qemuRoutes,
  ...cloneRoutes,
  ...agentRoutes,
  ...storageRoutes,
  ...accessRoutes,
  ...resizeRoutes,
  ...agentInfoRoutes,
  ...userConfigRoutes,
];

export async function startSimulator(opts: SimOptions = {}): Promise<Simulator> {
  const nodes = opts.nodes ?? ["pve1", "pve2"];
  const timing: SimTiming = { ...DEFAULT_TIMING, ...opts.timing };
  const state = new ClusterState(nodes, opts.pools ?? ["bigfleet"], timing);
  for (const st of opts.storages ?? DEFAULT_STORAGES) state.addStorage(st);
  configureNodes(state, opts.nodeResources, opts.bridges);
  const templates = opts.templates ?? [{
    vmid: 9000,
    node: nodes[0],
    name: "tmpl-k8s",
    tags: "k8s;template",
    description: "base",
    agent: "1",
    template: true,
  }];
  for (const t of templates) state.addTemplate(t);
  for (const c of opts.lxc ?? [{ vmid: 150, name: "ct-infra" }]) state.addLxc(c);

  const timers = new Timers();
  const faults = defaultFaults(opts.auditHidden ?? false);
  faults.acl = opts.acl ?? null;
  faults.datacenter = opts.datacenter ?? {};
  const workers = opts.pvedaemonWorkers ?? 3;
  const core: SimCore = {
    state,
    tasks: new TaskRegistry(timers, faults),
    timers,
    faults,
    daemons: new Map(nodes.map((n) => [n, new WorkerPool(workers)])),
    bootstrapPath: opts.bootstrapPath ?? "/run/bigfleet-bootstrap",
    bootstrapExec: opts.bootstrapExec ?? ["/bin/sh"],
    readyExec: opts.readyExec ?? BUILTIN_READY_EXEC,
    pveVersion: opts.pveVersion ?? "8.4.1",
    qemuServerVersion: opts.qemuServerVersion ?? qemuServerFor(opts.pveVersion ?? "8.4.1"),
  };

  const ownDir = opts.certDir === undefined;
  const pki = await makeTestPki(opts.certDir);
  const tokenId = opts.tokenId ?? "bigfleet@pve!autoscaler";
  const tokenSecret = opts.tokenSecret ?? crypto.randomUUID();
  const requests: SimRequestLog[] = [];
  const tokens = new Map([[tokenId, tokenSecret]]);
  const server = new SimServer({
    core,
    routes: ROUTES,
    tokens,
    legacyErrors: opts.legacyErrors ?? false,
    authFailDelayMs: opts.authFailDelayMs ?? 0,
    maxBodyBytes: opts.maxBodyBytes ?? 512 * 1024,
    requests,
    certPem: pki.server.certPem,
    keyPem: pki.server.keyPem,
  });
  const host = opts.host ?? "127.0.0.1";
  const port = await server.listen(opts.port ?? 0, host);
  const urlHost = host.includes(":") ? `[${host}]` : host;

  let closed = false;
  const mustVm = (vmid: number) => {
    const vm = state.vms.get(vmid);
    if (!vm) throw new Error(`pvesim: no VM ${vmid}`);
    return vm;
  };
  const editVmOutOfBand = (vmid: number, edit: (c: Record<string, string | number>) => void) => {
    const vm = mustVm(vmid);
    edit(vm.config);
    state.publish(vm);
  };
  return {
    url: `https://${urlHost}:${port}/api2/json`,
    host,
    port,
    caPem: pki.ca.certPem,
    caFile: pki.ca.certFile,
    fingerprint: pki.server.fingerprint,
    wrongCaPem: pki.wrongCa.certPem,
    wrongCaFile: pki.wrongCa.certFile,
    tokenId,
    tokenSecret,
    authHeader: `PVEAPIToken=${tokenId}=${tokenSecret}`,
    addToken: (id, secret) => void tokens.set(id, secret),
    removeToken: (id) => void tokens.delete(id),
    faults,
    timing,
    requests,
    vms: () =>
      [...state.vms.values()].sort((a, b) => a.vmid - b.vmid).map((v) => state.snapshot(v)),
    vm: (vmid) => {
      const v = state.vms.get(vmid);
      return v ? state.snapshot(v) : undefined;
    },
    tasks: () => core.tasks.list(),
    stopVmOutOfBand: (vmid) => {
      const vm = mustVm(vmid);
      if (vm.status === "running") state.setRunning(vm, false);
    },
    startVmOutOfBand: (vmid) => {
      const vm = mustVm(vmid);
      if (vm.status !== "running") state.setRunning(vm, true);
    },
    deleteVmOutOfBand: (vmid) => {
      mustVm(vmid);
      state.vms.delete(vmid);
    },
    editVmOutOfBand,
    cutNode: (node, mode = "link") => cutNode(core, node, mode),
    rejoinNode: (node) => rejoinNode(core, node),
    leftoverVolumes: () =>
      [...state.leftovers].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([volid, where]) => ({ volid, ...where })),
    addVm: (t) => void state.addTemplate(t),
    setNodeLoad: (node, load) => setNodeLoad(state, node, load),
    setLock: (vmid, lock) => {
      const vm = mustVm(vmid);
      if (lock === undefined) delete vm.config.lock;
      else vm.config.lock = lock;
    },
    backupVm: async (vmid, ms) => {
      const vm = mustVm(vmid);
      vm.config.lock = "backup";
      await timers.sleep(ms);
      if (vm.config.lock === "backup") delete vm.config.lock;
    },
    editConfig: (vmid, changes) =>
      editVmOutOfBand(vmid, (config) => {
        for (const [k, v] of Object.entries(changes)) {
          if (v === null) delete config[k];
          else config[k] = v;
        }
      }),
    holdConfigLock: async (vmid, ms) => {
      const vm = mustVm(vmid);
      const release = await takeLock(state.locks, timers, configLock(vm.node, vmid), 60_000);
      await timers.sleep(ms);
      release();
    },
    holdStorageLock: async (storage, ms, node) => {
      const s = state.storages.get(storage);
      if (!s) throw new Error(`pvesim: no storage ${storage}`);
      const spec = storageLock(storage, s.shared, node ?? nodes[0]);
      const release = await takeLock(state.locks, timers, spec, 60_000);
      await timers.sleep(ms);
      release();
    },
    occupyWorkers: async (node, count, until) => {
      const pool = core.daemons.get(node);
      if (!pool) throw new Error(`pvesim: no node ${node}`);
      const held = () => typeof until === "number" ? timers.sleep(until) : until.then(() => {});
      await Promise.all(Array.from({ length: count }, () => pool.run(held)));
    },
    workerPools: () =>
      Object.fromEntries(
        [...core.daemons].map((
          [n, p],
        ) => [n, {
          size: p.size,
          busy: p.busy,
          queued: p.queued,
          maxWaitMs: p.maxWaitMs,
          peakBusy: p.peakBusy,
        }]),
      ),
    close: async () => {
      if (closed) return;
      closed = true;
      timers.close();
      await server.close();
      if (ownDir) await Deno.remove(pki.dir, { recursive: true }).catch(() => {});
    },
  };
}
