// POST /nodes/{node}/qemu/{vmid}/clone: synchronous pre-checks (pool,
// target, storages, source lock, local storage with a target, newid), then a
// qmclone worker that copies every non-snapshot key of the source and its
// drives one by one (the phases of §5) and loses the races of §7.

import { ApiError, fail, forbidden, lockedError, TaskFailure } from "../errors.ts";
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
import { isCloudinit, isDriveKey, volumesOf, volumeStorage } from "../storage.ts";
import {
  checkCloneFeatures,
  checkCloneStorage,
  clonedDrives,
  cloneVolume,
  storageFor,
} from "../clonedisk.ts";
import { checkCloneAccess, checkNetworkAccess, hasPriv, requireOnVm, vmPoolOf } from "../acl.ts";
import { configLock, lockKey, storageLock, takeLock } from "../locks.ts";
import type { Task } from "../tasks.ts";
import { checkNode } from "./nodes.ts";
import { vmPerm } from "./qemu.ts";
import { allocatedLog, checkCpuModelAccess, cloneStartLog } from "../versions.ts";

interface CloneArgs {
  node: string;
  newid: number;
  name?: string;
  description?: string;
  pool?: string;
  target?: string;
  full: boolean;
  /** Target storage of a full clone; default: each disk's own storage. */
  storage?: string;
  /** Target format of a full clone's disks (clonedisk.ts). */
  format?: string;
}

const existsText = (id: number) => `unable to create VM ${id}: config file already exists`;

/** Keys a clone never copies: snapshot state and unused volumes (qemu-server clone_vm). */
function skippedOnClone(key: string): boolean {
  return ["snapshots", "parent", "snaptime", "vmstate", "snapstate", "template", "lock"]
    .includes(key) || /^unused\d+$/.test(key);
}

/**
 * qemu-server's check_storage_access_clone: true when every volume (disks,
 * ISO and cloud-init drives alike) sits on shared storage; the physical
 * `cdrom` and `none` do not count.
 */
function sharedVm(core: SimCore, config: VmRecord["config"]): boolean {
  let shared = true;
  for (const v of volumesOf(config)) {
    if (v.storage === null) throw fail(`unable to parse volume ID '${v.volid}'`);
    if (!storageFor(core, v.storage).shared) shared = false;
  }
  return shared;
}

function newMac(): string {
  const b = crypto.getRandomValues(new Uint8Array(3));
  return ["BC", "24", "11", ...Array.from(b, (x) => x.toString(16).padStart(2, "0"))]
    .join(":").toUpperCase();
}

/**
 * The clone's config before its drives: every other key of the source
 * (protection, sockets, vcpus, hookscript, NICs with their tags, ...), with
 * fresh MACs and SMBIOS uuid, a new vmgenid if the source had one, the given
 * name and description, and `lock: clone`.
 */
function clonedBase(src: VmRecord, a: CloneArgs): Record<string, ConfigValue> {
  const c: Record<string, ConfigValue> = { lock: "clone" };
  for (const [k, v] of Object.entries(src.config)) {
    if (skippedOnClone(k)) continue;
    if (isDriveKey(k) && clonedDrives(src.config).includes(k)) continue;
    if (/^net\d+$/.test(k)) {
      c[k] = String(v).replace(/=([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}/, `=${newMac()}`);
    } else c[k] = v;
  }
  const identity = freshIdentity();
  const smbios = String(c.smbios1 ?? "");
  c.smbios1 = /uuid=[^,]*/.test(smbios)
    ? smbios.replace(/uuid=[^,]*/, identity.smbios1)
    : [identity.smbios1, smbios].filter(Boolean).join(",");
  if (c.vmgenid !== undefined) c.vmgenid = identity.vmgenid;
  c.name = a.name ?? `Copy-of-VM-${src.config.name ?? src.vmid}`;
  if (a.description) c.description = a.description;
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
      const key = lockKey(configLock(a.node, a.newid));
      if (!core.state.locks.tryTake(key, false)) break;
      core.timers.sleep(core.state.timing.lockTimeoutMs + 20).then(() => {
        foreignVm(core, a.newid, a.node);
        core.state.locks.release(key, false);
      });
      break;
    }
  }
}

/** The temporary config clone_vm writes before its first disk: `# qmclone temporary file\nlock: clone\n`. */
export const TEMPORARY_CONFIG: Readonly<Record<string, ConfigValue>> = {
  // parse_vm_config reads the comment line as the description.
  description: " qmclone temporary file",
  lock: "clone",
};

/**
 * The qmclone worker (qemu-server API2/Qemu.pm clone_vm): the source's
 * config lock shared and the newid's exclusive (each given up after
 * lockTimeoutMs), then the clone itself.
 */
async function cloneWorker(
  core: SimCore,
  task: Task,
  srcVmid: number,
  a: CloneArgs,
): Promise<number> {
  const { state, timers } = core;
  const wait = state.timing.lockTimeoutMs;
  const log = task.log;
  const source = await takeLock(state.locks, timers, configLock(a.node, srcVmid, true), wait, log);
  try {
    const target = await takeLock(state.locks, timers, configLock(a.node, a.newid), wait, log);
    try {
      return await cloneVm(core, task, srcVmid, a);
    } finally {
      target();
    }
  } finally {
    source();
  }
}

/** clone_vm's `$clonefn`, under both config locks. */
async function cloneVm(core: SimCore, task: Task, srcVmid: number, a: CloneArgs): Promise<number> {
  const { state, timers, faults } = core;
  const timing = state.timing;
  task.log.push(...cloneStartLog(core, srcVmid, a.newid));
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
  // The worker re-runs the pre-checks under its locks.
  if (src.config.lock !== undefined) {
    throw new TaskFailure(lockedError(String(src.config.lock)).message);
  }

  // Phase 1: the temporary config while the first disk is allocated and copied.
  const vm = newVmRecord(a.newid, a.node, { ...TEMPORARY_CONFIG });
  vm.guest = src.guest;
  state.vms.set(a.newid, vm);
  state.publish(vm);
  const gone = () => state.vms.get(a.newid) !== vm;
  try {
    // Phase 2: one drive after the other, each allocated under its storage's
    // lock and then copied; the config is rewritten after each (still
    // locked), so the name shows only once the first disk is done.
    const drives = clonedDrives(src.config);
    const base = clonedBase(src, a);
    const names = new Set<string>();
    const rest = Math.max(0, timing.cloneMs - timing.cloneNamelessMs);
    const later = rest / Math.max(1, drives.length);
    const written: Record<string, ConfigValue> = {};
    for (const [i, key] of drives.entries()) {
      const { value: volume, log: made } = cloneVolume(core, src.config, key, a, names);
      const full = a.full || isCloudinit(src.config[key]);
      task.log.push(made);
      await allocate(core, task, volumeStorage(volume) ?? "local-lvm", a.node);
      task.log.push(...allocatedLog(core, volume, full));
      await timers.sleep(i === 0 ? timing.cloneNamelessMs : later);
      while (i === 0 && faults.cloneHeld.includes(a.newid) && !gone()) await timers.sleep(10);
      if (gone()) throw new TaskFailure(`unable to open file for VM ${a.newid}`);
      written[key] = volume;
      vm.config = { ...base, ...written };
      state.publish(vm);
    }
    if (drives.length === 0) {
      await timers.sleep(timing.cloneNamelessMs);
      vm.config = { ...base };
    }
    await timers.sleep(later);
    if (gone()) throw new TaskFailure(`unable to open file for VM ${a.newid}`);
    const err = takeTaskError(faults, "qmclone");
    if (err !== undefined) throw new TaskFailure(err);
  } catch (err) {
    // The worker frees the new volumes and removes the config, last thing before it dies.
    if (!gone()) {
      if (faults.cloneCleanupFails) {
        delete vm.config.lock;
        state.publish(vm);
      } else state.vms.delete(a.newid);
    }
    throw new TaskFailure(`clone failed: ${(err as Error).message.replace(/\n+$/, "")}`);
  }

  // Phase 3: unlock, move to the target node, join the pool.
  delete vm.config.lock;
  if (a.target && a.target !== a.node) vm.node = a.target;
  if (a.pool) vm.pool = a.pool;
  state.publish(vm);
  return faults.cloneWarnings ? 1 : 0;
}

/** vdisk_alloc: the storage's lock, held while the volume is allocated. */
async function allocate(core: SimCore, task: Task, storage: string, node: string): Promise<void> {
  const { state, timers } = core;
  const shared = state.storages.get(storage)?.shared ?? false;
  const release = await takeLock(
    state.locks,
    timers,
    storageLock(storage, shared, node),
    state.timing.storageLockTimeoutMs,
    task.log,
  );
  try {
    await timers.sleep(state.timing.storageAllocMs);
  } finally {
    release();
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
    check: cloneCheck,
    // The POST holds its worker for the checks and until the task is forked.
    workerMs: ({ core }) => core.state.timing.cloneForkMs,
    handler: ({ core, params, authid }) => {
      const a = cloneArgs(params);
      if (a.pool !== undefined && !core.state.pools.has(a.pool)) {
        throw new ApiError(403, `Permission check failed (pool '${a.pool}' does not exist)`);
      }
      checkNode(core, a.node);
      if (a.target !== undefined && !core.state.isNode(a.target)) {
        throw fail(`no such cluster node '${a.target}'`);
      }
      checkCloneStorage(core, a);
      const src = sourceVm(core, a.node, params.vmid as number);
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
      // Every volume counts, CD-ROM ISOs and cloud-init drives included.
      if (!sharedVm(core, src.config) && a.target !== undefined) {
        throw fail(`can't clone VM to node '${a.target}' (VM uses local storage)`);
      }
      // Storages, the host CD-ROM and mapped devices, then SDN.Use on each
      // NIC's bridge or VLAN (check_vnet_access), all before the fork.
      checkCloneAccess(core, src.config, a.storage);
      checkCpuModelAccess(core, src.config);
      checkNetworkAccess(core, src.config);
      const race = takeRace(core);
      if (race === "sync") injectRace(core, a, race);
      // Only the local node's config directory is checked here.
      const clash = core.state.vms.get(a.newid);
      if (clash && clash.node === a.node) throw fail(existsText(a.newid));
      checkCloneFeatures(core, src.config, a.full);
      if (race !== null && race !== "sync") injectRace(core, a, race);
      const t = core.tasks.start(
        a.node,
        "qmclone",
        String(src.vmid),
        authid,
        (task) => cloneWorker(core, task, src.vmid, a),
      );
      if (core.faults.cloneWarnings) {
        t.log.push(`found pending changes for 'cores', discarding for clone`);
      }
      return t.upid;
    },
  },
];

/** check_running's assert_config_exists_on_node, which clone_vm runs before reading the config. */
function sourceVm(core: SimCore, node: string, vmid: number): VmRecord {
  const vm = core.state.vms.get(vmid);
  if (!vm || vm.node !== node) {
    throw fail(`unable to find configuration file for VM ${vmid} on node '${node}'`);
  }
  return vm;
}

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
    storage: p.storage as string | undefined,
    format: p.format as string | undefined,
  };
}

/** clone_vm's permissions: VM.Clone on the source, VM.Allocate on the new VMID or the pool. */
function cloneCheck(core: SimCore, p: Params): void {
  const acl = core.faults.acl;
  if (acl === null) return;
  requireOnVm(core, p.vmid as number, "VM.Clone");
  const newid = p.newid as number;
  const pool = p.pool as string | undefined;
  if (hasPriv(acl, `/vms/${newid}`, "VM.Allocate", vmPoolOf(core))) return;
  if (pool !== undefined && hasPriv(acl, `/pool/${pool}`, "VM.Allocate")) return;
  throw forbidden(`/vms/${newid}`, "VM.Allocate");
}
