// /cluster/status, /cluster/resources, /cluster/nextid, /version.

import { fail, paramError } from "../errors.ts";
import { vmidFormat } from "../params.ts";
import type { Route, SimCore } from "../router.ts";
import type { StatusView, VmRecord } from "../state.ts";
import { nodeResourceFigures } from "../capacity.ts";
import { hasPriv, mayOnVm } from "../acl.ts";
import { guestFields, nodeSilent, quorate } from "../multinode.ts";
import { statusView } from "../statuscache.ts";
import { clusterOptions, nextIdRange } from "../policy.ts";
import { storageEntries } from "./storage.ts";

const root = (): [string, string] => ["/", "Sys.Audit"];

function clusterStatus(core: SimCore): unknown[] {
  const nodes = core.state.nodes;
  const out: unknown[] = [];
  // A single node is not "clustered": no cluster entry then.
  if (nodes.length > 1) {
    out.push({
      type: "cluster",
      id: "cluster",
      name: "pvesim",
      version: 7,
      quorate: quorate(core) ? 1 : 0,
      nodes: nodes.length,
    });
  }
  nodes.forEach((n, i) =>
    out.push({
      type: "node",
      id: `node/${n}`,
      name: n,
      nodeid: i + 1,
      ip: `10.0.0.${i + 1}`,
      local: i === 0 ? 1 : 0,
      online: core.faults.offlineNodes.includes(n) ? 0 : 1,
      level: "",
    })
  );
  return out;
}

function qemuEntry(core: SimCore, vm: VmRecord, view: StatusView): Record<string, unknown> {
  const e: Record<string, unknown> = {
    id: `qemu/${vm.vmid}`,
    vmid: vm.vmid,
    node: vm.node,
    type: "qemu",
  };
  // name/status/template come from pvestatd's RRD data, which lags, which
  // stays a while after its node went down and is then gone (multinode.ts).
  const fields = guestFields(core, vm, view);
  if (fields) Object.assign(e, fields);
  else e.status = "unknown";
  // lock and tags are read straight from the config file: no lag.
  if (vm.pool) e.pool = vm.pool;
  if (vm.config.tags !== undefined) e.tags = String(vm.config.tags);
  if (vm.config.lock !== undefined) e.lock = String(vm.config.lock);
  // From the HA manager's status, not pvestatd: no lag.
  if (vm.hastate !== undefined) e.hastate = vm.hastate;
  return e;
}

/**
 * A node as /nodes and cluster/resources list it; a node that is down has no
 * stats, and neither has any node to a caller without Sys.Audit on
 * /nodes/<node> (API2Tools extract_node_stats' `exclude_stats`).
 */
export function nodeEntry(core: SimCore, n: string): Record<string, unknown> {
  if (core.faults.offlineNodes.includes(n)) {
    return { id: `node/${n}`, type: "node", node: n, status: "offline", level: "" };
  }
  // Figures (and `online`) come only from the node's pvestatd reports (API2Tools extract_node_stats).
  if (nodeSilent(core, n)) {
    return { id: `node/${n}`, type: "node", node: n, status: "unknown" };
  }
  const acl = core.faults.acl;
  if (acl !== null && !hasPriv(acl, `/nodes/${n}`, "Sys.Audit")) {
    return { id: `node/${n}`, type: "node", node: n, status: "online", level: "" };
  }
  return {
    id: `node/${n}`,
    type: "node",
    node: n,
    status: "online",
    level: "",
    ...nodeResourceFigures(core, n),
    maxdisk: 107374182400,
    disk: 10737418240,
    uptime: 864000,
    cgroup_mode: 2,
  };
}

function resources(core: SimCore, type?: string): unknown[] {
  const out: unknown[] = [];
  const { state, faults } = core;
  if (type === undefined || type === "node") {
    for (const n of state.nodes) out.push(nodeEntry(core, n));
  }
  if (type === undefined || type === "storage") out.push(...storageEntries(core));
  if ((type === undefined || type === "vm") && !faults.auditHidden) {
    // Without VM.Audit guests are silently left out (no 403).
    const view = statusView(core);
    for (const vm of [...state.vms.values()].sort((a, b) => a.vmid - b.vmid)) {
      if (mayOnVm(core, vm.vmid, "VM.Audit")) out.push(qemuEntry(core, vm, view));
    }
    for (const ct of state.lxc.values()) {
      if (!mayOnVm(core, ct.vmid, "VM.Audit")) continue;
      out.push({
        id: `lxc/${ct.vmid}`,
        vmid: ct.vmid,
        node: ct.node,
        type: "lxc",
        status: ct.status,
        name: ct.name,
        template: 0,
        maxcpu: 1,
        cpu: 0,
        maxmem: 536870912,
        mem: 0,
        maxdisk: 8589934592,
        disk: 0,
        uptime: ct.status === "running" ? 86400 : 0,
        netin: 0,
        netout: 0,
        diskread: 0,
        diskwrite: 0,
      });
    }
  }
  if (type === undefined || type === "pool") {
    for (const p of state.pools) out.push({ id: `/pool/${p}`, type: "pool", pool: p });
  }
  return out;
}

/**
 * API2/Cluster.pm nextid: the lowest free VMID in datacenter.cfg's next-id
 * range [lower, upper); with `vmid` only whether that one is free, the
 * range not consulted.
 */
function nextId(core: SimCore, vmid?: number): string {
  const { state } = core;
  if (vmid !== undefined) {
    if (state.vmidTaken(vmid)) throw paramError({ vmid: `VM ${vmid} already exists` });
    return String(vmid);
  }
  // Nothing is reserved: an in-flight clone takes its id only once its worker wrote the config.
  const { lower, upper } = nextIdRange(core);
  for (let id = lower; id < upper; id++) if (!state.vmidTaken(id)) return String(id);
  throw fail(`unable to get any free VMID in range [${lower}, ${upper}]`);
}

/** What /version and /nodes/{node}/version answer (any authenticated caller). */
export function versionInfo(core: SimCore): Record<string, string> {
  return {
    version: core.pveVersion,
    release: core.pveVersion.split(".").slice(0, 2).join("."),
    repoid: "2a5fa54a8503f96d",
  };
}

export const clusterRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/version",
    schema: {},
    perm: root,
    handler: ({ core }) => versionInfo(core),
  },
  {
    method: "GET",
    pattern: "/cluster/status",
    schema: {},
    perm: root,
    handler: ({ core }) => clusterStatus(core),
  },
  {
    method: "GET",
    pattern: "/cluster/resources",
    schema: { type: { type: "string", optional: true, enum: ["vm", "storage", "node", "sdn"] } },
    perm: root,
    handler: ({ core, params }) =>
      params.type === "sdn" ? [] : resources(core, params.type as string | undefined),
  },
  {
    method: "GET",
    pattern: "/cluster/nextid",
    schema: { vmid: { type: "integer", optional: true, format: vmidFormat } },
    perm: root,
    handler: ({ core, params }) => nextId(core, params.vmid as number | undefined),
  },
  {
    // Every user may ask; without Sys.Audit on / most options are left out (policy.ts).
    method: "GET",
    pattern: "/cluster/options",
    schema: {},
    perm: root,
    handler: ({ core }) => clusterOptions(core),
  },
];
