// Proxmox VE REST API simulator for tests: startSimulator() serves a
// faithful subset of /api2/json over HTTPS (see README.md).

import { makeTestPki } from "./certs.ts";
import { defaultFaults } from "./faults.ts";
import type { Route, SimCore } from "./router.ts";
import { agentRoutes } from "./routes/agent.ts";
import { cloneRoutes } from "./routes/clone.ts";
import { clusterRoutes } from "./routes/cluster.ts";
import { nodeRoutes } from "./routes/nodes.ts";
import { qemuRoutes } from "./routes/qemu.ts";
import { SimServer } from "./server.ts";
import { ClusterState } from "./state.ts";
import { TaskRegistry, Timers } from "./tasks.ts";
import type { SimOptions, SimRequestLog, SimTiming, Simulator } from "./types.ts";

export type * from "./types.ts";
export { issueCert, makeCa, makeTestPki, pemFingerprint } from "./certs.ts";

export const DEFAULT_TIMING: SimTiming = {
  cloneMs: 300,
  cloneNamelessMs: 100,
  taskMs: 50,
  agentBootMs: 200,
  resourcesLagMs: 100,
  execMs: 50,
  lockTimeoutMs: 200,
};

const ROUTES: Route[] = [
  ...clusterRoutes,
  ...nodeRoutes,
  ...qemuRoutes,
  ...cloneRoutes,
  ...agentRoutes,
];

export async function startSimulator(opts: SimOptions = {}): Promise<Simulator> {
  const nodes = opts.nodes ?? ["pve1", "pve2"];
  const timing: SimTiming = { ...DEFAULT_TIMING, ...opts.timing };
  const state = new ClusterState(nodes, opts.pools ?? ["bigfleet"], timing);
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
  const core: SimCore = {
    state,
    tasks: new TaskRegistry(timers),
    timers,
    faults,
    bootstrapPath: opts.bootstrapPath ?? "/run/bigfleet-bootstrap",
    bootstrapExec: opts.bootstrapExec ?? ["/bin/sh"],
    pveVersion: opts.pveVersion ?? "8.4.1",
  };

  const ownDir = opts.certDir === undefined;
  const pki = await makeTestPki(opts.certDir);
  const tokenId = opts.tokenId ?? "bigfleet@pve!autoscaler";
  const tokenSecret = opts.tokenSecret ?? crypto.randomUUID();
  const requests: SimRequestLog[] = [];
  const server = new SimServer({
    core,
    routes: ROUTES,
    tokenId,
    tokenSecret,
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
    faults,
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
    editVmOutOfBand: (vmid, edit) => {
      const vm = mustVm(vmid);
      edit(vm.config);
      state.publish(vm);
    },
    addVm: (t) => void state.addTemplate(t),
    close: async () => {
      if (closed) return;
      closed = true;
      timers.close();
      await server.close();
      if (ownDir) await Deno.remove(pki.dir, { recursive: true }).catch(() => {});
    },
  };
}
