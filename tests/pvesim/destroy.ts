// Disks and storage availability as qemu-server's destroy_vm meets them:
// referenced volumes are freed first (a volume already gone is a warning,
// not an error); with destroy-unreferenced-disks=1 it then lists the VMID's
// volumes on every image storage of the node, which activates each storage,
// and an offline one ends the task (`storage 'x' is not online`) before the
// config is removed. A retry frees nothing new and dies the same way.

import { TaskFailure } from "./errors.ts";
import type { SimCore } from "./router.ts";
import type { VmRecord } from "./state.ts";

/** Volumes each VM record has already had freed (a failed destroy leaves its config behind). */
const freed = new WeakMap<VmRecord, Set<string>>();

const DISK_KEY = /^(scsi|virtio|sata|ide|efidisk|tpmstate|unused)\d+$/;

/** The volume ids the config owns (CD-ROM images on shared ISO storage are not owned). */
export function ownedVolumes(vm: VmRecord): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DISK_KEY.test(k)) continue;
    const s = String(v);
    if (/(^|,)media=cdrom(,|$)/.test(s) && !s.includes("cloudinit")) continue;
    const volid = s.split(",")[0];
    if (volid.includes(":")) out.push(volid);
  }
  return out;
}

/** Image storages that are offline right now (faults.offlineStorages). */
export function offlineStorages(core: SimCore): string[] {
  return core.faults.offlineStorages;
}

/**
 * The disk part of a destroy worker. Returns the number of warnings
 * (volumes that were already gone); throws TaskFailure like the real worker.
 */
export function destroyDisks(core: SimCore, vm: VmRecord, purgeUnreferenced: boolean): number {
  const done = freed.get(vm) ?? new Set<string>();
  freed.set(vm, done);
  let warnings = 0;
  for (const volid of ownedVolumes(vm)) {
    if (done.has(volid)) warnings++;
    else done.add(volid);
  }
  const offline = offlineStorages(core);
  if (purgeUnreferenced && offline.length > 0) {
    throw new TaskFailure(`storage '${offline[0]}' is not online`);
  }
  return warnings;
}

/** Volumes of this VM that were freed by (possibly failed) destroy tasks. */
export function freedVolumes(vm: VmRecord): string[] {
  return [...(freed.get(vm) ?? [])];
}
