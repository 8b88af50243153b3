// /nodes/{node}/status, /nodes/{node}/qemu (list) and task status/log.

import { fail, paramError } from "../errors.ts";
import { NODE } from "../params.ts";
import type { Route, SimCore } from "../router.ts";
import { parseUpid, type Task } from "../tasks.ts";
import { nodeEntry, versionInfo } from "./cluster.ts";
import { mayOnVm } from "../acl.ts";
import { nodeStatusFigures } from "../capacity.ts";
import { checkTaskAccess, maySeeTask } from "../task_access.ts";

/** pveproxy resolves the node name before proxying; an unknown one dies. */
export function checkNode(core: SimCore, node: string): void {
  if (!core.state.isNode(node)) {
    throw fail(
      `hostname lookup '${node}' failed - failed to get address info for: ${node}: Temporary failure in name resolution`,
    );
  }
}

function nodeStatus(core: SimCore): Record<string, unknown> {
  // cpu, cpuinfo, memory and swap: capacity.ts nodeStatusFigures.
  return {
    wait: 0.001,
    idle: 0,
    uptime: 864000,
    loadavg: ["0.42", "0.38", "0.35"],
    kversion: "Linux 6.8.12-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4 (2024-11-06T15:04Z)",
    pveversion: `pve-manager/${core.pveVersion}/2a5fa54a8503f96d`,
    "current-kernel": {
      machine: "x86_64",
      release: "6.8.12-4-pve",
      sysname: "Linux",
      version: "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-4 (2024-11-06T15:04Z)",
    },
    "boot-info": { mode: "efi", secureboot: 0 },
    rootfs: { total: 107374182400, used: 10737418240, free: 96636764160, avail: 91000000000 },
    ksm: { shared: 0 },
  };
}

function findTask(core: SimCore, node: string, upid: string): Task {
  const parsed = parseUpid(upid);
  if (!parsed) throw paramError({ upid: "unable to parse worker upid" });
  // Decoding accepts either hex case; the registry keys are upper-case.
  const t = [...core.tasks.tasks.values()].find((x) => x.upid.toUpperCase() === upid.toUpperCase());
  // The task log lives on the UPID's node: asking another node finds nothing.
  if (!t || parsed.node !== node) throw paramError({ upid: "no such task" });
  return t;
}

const nodePerm = (p: Record<string, unknown>): [string, string] => [
  `/nodes/${p.node}`,
  "Sys.Audit",
];

export const nodeRoutes: Route[] = [
  {
    // Served by the node we talk to from cluster membership: no proxying.
    method: "GET",
    pattern: "/nodes",
    schema: {},
    perm: () => ["/", "Sys.Audit"],
    handler: ({ core }) => core.state.nodes.map((n) => nodeEntry(core, n)),
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/status",
    schema: { node: NODE },
    perm: nodePerm,
    handler: ({ core, params }) => {
      checkNode(core, params.node as string);
      return { ...nodeStatus(core), ...nodeStatusFigures(core, params.node as string) };
    },
  },
  {
    // Answered by the node itself (proxied), to any authenticated caller.
    method: "GET",
    pattern: "/nodes/{node}/version",
    schema: { node: NODE },
    perm: nodePerm,
    handler: ({ core, params }) => {
      checkNode(core, params.node as string);
      return versionInfo(core);
    },
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu",
    schema: { node: NODE, full: { type: "boolean", optional: true } },
    perm: nodePerm,
    handler: ({ core, params }) => {
      checkNode(core, params.node as string);
      if (core.faults.auditHidden) return [];
      return [...core.state.vms.values()].filter((v) =>
        v.node === params.node && mayOnVm(core, v.vmid, "VM.Audit")
      ).map((v) => {
        const e: Record<string, unknown> = {
          vmid: v.vmid,
          status: v.status,
          name: v.config.name ?? `VM ${v.vmid}`,
        };
        if (v.config.template) e.template = 1;
        if (v.config.lock !== undefined) e.lock = v.config.lock;
        if (v.config.tags !== undefined) e.tags = v.config.tags;
        return e;
      });
    },
  },
  {
    // pve-manager API2/Tasks.pm node_tasks: answered by pveproxy (not protected).
    // `active` lists running tasks (status RUNNING, user the full token id, as
    // on the rig); the archive splits a token into user and tokenid. A caller
    // sees its own tasks, others' only with Sys.Audit on the node (task_access.ts).
    method: "GET",
    pattern: "/nodes/{node}/tasks",
    schema: {
      node: NODE,
      source: { type: "string", optional: true, enum: ["archive", "active", "all"] },
      typefilter: { type: "string", optional: true },
      vmid: { type: "integer", optional: true },
      userfilter: { type: "string", optional: true },
      start: { type: "integer", optional: true, min: 0 },
      limit: { type: "integer", optional: true, min: 0 },
      errors: { type: "boolean", optional: true },
    },
    perm: nodePerm,
    handler: ({ core, params, authid }) => {
      checkNode(core, params.node as string);
      const source = (params.source as string | undefined) ?? "archive";
      const out = [...core.tasks.tasks.values()]
        .filter((t) => t.node === params.node && maySeeTask(core, authid, t))
        .filter((t) => source === "all" || (source === "active") === (t.status === "running"))
        .filter((t) => params.typefilter === undefined || t.type === params.typefilter)
        .filter((t) => params.vmid === undefined || t.id === String(params.vmid))
        .filter((t) =>
          params.userfilter === undefined || t.user.includes(String(params.userfilter))
        )
        .filter((t) => !params.errors || (t.status === "stopped" && t.exitstatus !== "OK"))
        .sort((a, b) => b.starttime - a.starttime)
        .map((t) => {
          const { log: _log, ...rest } = t;
          if (t.status === "running") return { ...rest, status: "RUNNING" };
          const e = core.tasks.statusJson(t);
          return { ...e, status: t.exitstatus, endtime: e.starttime };
        });
      const start = (params.start as number | undefined) ?? 0;
      return out.slice(start, start + ((params.limit as number | undefined) ?? 50));
    },
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/tasks/{upid}/status",
    schema: { node: NODE, upid: { type: "string" } },
    perm: nodePerm,
    handler: ({ core, params, authid }) => {
      checkNode(core, params.node as string);
      const t = findTask(core, params.node as string, params.upid as string);
      checkTaskAccess(core, authid, t);
      return core.tasks.statusJson(t);
    },
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/tasks/{upid}/log",
    schema: {
      node: NODE,
      upid: { type: "string" },
      start: { type: "integer", optional: true, min: 0 },
      limit: { type: "integer", optional: true, min: 0 },
      download: { type: "boolean", optional: true },
    },
    perm: nodePerm,
    handler: ({ core, params, authid }) => {
      checkNode(core, params.node as string);
      const t = findTask(core, params.node as string, params.upid as string);
      checkTaskAccess(core, authid, t);
      const lines = t.log.length > 0 ? t.log : ["no content"];
      const start = (params.start as number | undefined) ?? 0;
      const limit = (params.limit as number | undefined) ?? 50;
      return lines.slice(start, start + limit).map((l, i) => ({ n: start + i + 1, t: l }));
    },
  },
];
