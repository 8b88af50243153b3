// POST /nodes/{node}/qemu/{vmid}/clone: synchronous pre-checks, then a
// qmclone worker that goes through the phases of §5 and the races of §7.

import { ApiError, fail, TaskFailure } from "../errors.ts";
import { takeTaskError } from "../faults.ts";
import { dnsName, NODE, nodeName, type Params, poolId, VMID, vmidFormat } from "../params.ts";
import type { Route, SimCore } from "../router.ts";
import {
  type ConfigValue,
  freshIdentity,
  newVmRecord,
  templateConfig,
  type VmRecord,
} from "../state.ts";
import { checkNetworkAccess } from "../acl.ts";
import { checkNode } from "./nodes.ts";
import { openVm, vmPerm } from "./qemu.ts";

interface CloneArgs {
  node: string;
  newid: number;
  name?: string;
  description?: string;
  pool?: string;
  target?: string;
  full: boolean;
}

const existsText = (id: number) => `unable to create VM ${id}: config file already exists`;

/** The config the clone gets after its first disk: the source's, re-identified. */
function clonedConfig(src: VmRecord, a: CloneArgs): Record<string, ConfigValue> {
  const c: Record<string, ConfigValue> = {};
  for (const [k, v] of Object.entries(src.config)) {
    if (k === "template" || k === "lock" || k === "description") continue;
    c[k] = v;
  }
  c.name = a.name ?? `Copy-of-VM-${src.config.name ?? src.vmid}`;
  const desc = a.description || src.config.description;
  if (desc !== undefined && desc !== "") c.description = desc;
  for (const [k, v] of Object.entries(c)) {
    if (/^(scsi|virtio|sata|ide)\d+$/.test(k) && String(v).includes(`-${src.vmid}-disk-`)) {
      const size = String(v).match(/size=[^,]+/)?.[0] ?? "size=20G";
      const n = String(v).match(/-disk-(\d+)/)?.[1] ?? "0";
      const base = String(v).split(",")[0];
      c[k] = a.full
        ? `local-lvm:vm-${a.newid}-disk-${n},${size}`
        : `${base}/vm-${a.newid}-disk-${n},${size}`;
    }
    if (/^net\d+$/.test(k)) {
      const b = crypto.getRandomValues(new Uint8Array(3));
      const mac = ["BC", "24", "11", ...Array.from(b, (x) => x.toString(16).padStart(2, "0"))]
        .join(":").toUpperCase();
      c[k] = String(v).replace(/=([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}/, `=${mac}`);
    }
  }
  Object.assign(c, freshIdentity());
  c.lock = "clone";
  return c;
}

/** The other party of an injected newid race (faults.nextidRace). */
function foreignVm(core: SimCore, vmid: number, node: string): void {
  const vm = newVmRecord(
    vmid,
    node,
    templateConfig({ vmid, name: `foreign-${vmid}`, template: false }),
  );
  vm.foreign = true;
  core.state.vms.set(vmid, vm);
  core.state.publish(vm);
}

type RaceKind = SimCore["faults"]["nextidRaceKind"];

/** Consumes one injected race, if any is pending. */
function takeRace(core: SimCore): RaceKind | null {
  const f = core.faults;
  if (f.nextidRace <= 0) return null;
  f.nextidRace--;
  return f.nextidRaceKind;
}

function injectRace(core: SimCore, a: CloneArgs, kind: RaceKind): void {
  const other = core.state.nodes.find((n) => n !== a.node) ?? a.node;
  switch (kind) {
    case "sync":
    case "config-exists":
      // "sync" runs before our pre-check, "config-exists" right after it.
      foreignVm(core, a.newid, a.node);
      break;
    case "other-node":
      foreignVm(core, a.newid, other);
      break;
    case "lock-timeout": {
      // The other clone holds the newid flock longer than our worker waits.
      const key = `${a.node}:${a.newid}`;
      core.state.cloneLocks.add(key);
      core.timers.sleep(core.state.timing.lockTimeoutMs + 20).then(() => {
        foreignVm(core, a.newid, a.node);
        core.state.cloneLocks.delete(key);
      });
      break;
    }
  }
}

async function cloneWorker(core: SimCore, srcVmid: number, a: CloneArgs): Promise<number> {
  const { state, timers, faults } = core;
  const timing = state.timing;
  const key = `${a.node}:${a.newid}`;
  const deadline = Date.now() + timing.lockTimeoutMs;
  while (state.cloneLocks.has(key)) {
    if (Date.now() >= deadline) {
      throw new TaskFailure(
        `can't lock file '/var/lock/qemu-server/lock-${a.newid}.conf' - got timeout`,
      );
    }
    await timers.sleep(Math.min(10, deadline - Date.now()));
  }
  state.cloneLocks.add(key);
  try {
    const src = state.vms.get(srcVmid);
    if (!src || src.node !== a.node) {
      throw new TaskFailure(
        `Configuration file 'nodes/${a.node}/qemu-server/${srcVmid}.conf' does not exist`,
      );
    }
    const existing = state.vms.get(a.newid);
    if (existing && existing.node !== a.node) {
      // pmxcfs refuses a VMID that exists on another node.
      throw new TaskFailure(
        `close (rename) atomic file '/etc/pve/nodes/${a.node}/qemu-server/${a.newid}.conf' failed: File exists`,
      );
    }
    if (existing || state.lxc.has(a.newid)) throw new TaskFailure(existsText(a.newid));

    // Phase 1: temporary config, no name, while the first disk copies.
    const vm = newVmRecord(a.newid, a.node, { lock: "clone" });
    vm.sharedStorage = src.sharedStorage;
    state.vms.set(a.newid, vm);
    state.publish(vm);
    await timers.sleep(timing.cloneNamelessMs);

    // Phase 2: full config, still locked.
    const gone = () => state.vms.get(a.newid) !== vm;
    if (gone()) throw new TaskFailure(`clone failed: unable to open file for VM ${a.newid}`);
    vm.config = clonedConfig(src, a);
    state.publish(vm);
    await timers.sleep(Math.max(0, timing.cloneMs - timing.cloneNamelessMs));
    if (gone()) throw new TaskFailure(`clone failed: unable to open file for VM ${a.newid}`);

    const err = takeTaskError(faults, "qmclone");
    if (err !== undefined) {
      // The worker frees new volumes and deletes the new config on failure.
      state.vms.delete(a.newid);
      throw new TaskFailure(`clone failed: ${err}`);
    }

    // Phase 3: unlock, move to the target node, join the pool.
    delete vm.config.lock;
    if (a.target && a.target !== a.node) vm.node = a.target;
    if (a.pool) vm.pool = a.pool;
    state.publish(vm);
    return faults.cloneWarnings ? 1 : 0;
  } finally {
    state.cloneLocks.delete(key);
  }
}

export const cloneRoutes: Route[] = [
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/clone",
    schema: {
      node: NODE,
      vmid: VMID,
      newid: { type: "integer", format: vmidFormat },
      name: { type: "string", optional: true, format: dnsName },
      description: { type: "string", optional: true },
      pool: { type: "string", optional: true, format: poolId },
      full: { type: "boolean", optional: true },
      target: { type: "string", optional: true, format: nodeName },
      storage: { type: "string", optional: true },
      format: { type: "string", optional: true, enum: ["raw", "qcow2", "vmdk"] },
      snapname: { type: "string", optional: true },
      bwlimit: { type: "integer", optional: true, min: 0 },
    },
    perm: vmPerm("VM.Clone"),
    handler: ({ core, params, authid }) => {
      const a = cloneArgs(params);
      if (a.pool !== undefined && !core.state.pools.has(a.pool)) {
        throw new ApiError(403, `Permission check failed (pool '${a.pool}' does not exist)`);
      }
      checkNode(core, a.node);
      if (a.target !== undefined && !core.state.isNode(a.target)) {
        throw fail(`no such cluster node '${a.target}'`);
      }
      const src = openVm(core, params);
      core.state.checkLock(src);
      if (params.snapname !== undefined) {
        throw fail(`snapshot '${params.snapname}' does not exist`);
      }
      // Default: linked clone for a template, full copy otherwise.
      if (params.full === undefined) a.full = !src.config.template;
      const linked = !a.full;
      for (const opt of ["storage", "format"]) {
        if (linked && params[opt] !== undefined) {
          throw fail(`parameter '${opt}' not allowed for linked clones`);
        }
      }
      if (linked && !src.config.template) {
        throw fail("Linked clone feature is not supported for drive 'scsi0'");
      }
      if (a.target !== undefined && a.target !== a.node && !src.sharedStorage) {
        throw fail(`can't clone VM to node '${a.target}' (VM uses local storage)`);
      }
      // SDN.Use on each NIC's bridge or VLAN, before the fork (check_vnet_access).
      checkNetworkAccess(core, src.config);
      const race = takeRace(core);
      if (race === "sync") injectRace(core, a, race);
      // Only the local node's config directory is checked here.
      const clash = core.state.vms.get(a.newid);
      if (clash && clash.node === a.node) throw fail(existsText(a.newid));
      if (race !== null && race !== "sync") injectRace(core, a, race);
      const t = core.tasks.start(
        a.node,
        "qmclone",
        String(src.vmid),
        authid,
        () => cloneWorker(core, src.vmid, a),
      );
      if (core.faults.cloneWarnings) {
        t.log.push(`found pending changes for 'cores', discarding for clone`);
      }
      return t.upid;
    },
  },
];

function cloneArgs(p: Params): CloneArgs {
  const node = p.node as string;
  const target = p.target as string | undefined;
  return {
    node,
    newid: p.newid as number,
    name: p.name as string | undefined,
    description: p.description as string | undefined,
    pool: p.pool as string | undefined,
    target: target === node ? undefined : target,
    full: (p.full as boolean | undefined) ?? false,
  };
}
