// Disks and storage availability as qemu-server's destroy_vm meets them:
// referenced volumes are freed first (a volume already gone is a warning,
// not an error; one whose vdisk_free fails is only warned about in the task
// log, `Could not remove disk '<volid>', check manually: <error>`, with a
// plain Perl `warn` that PVE 8.4's task does not count, so the task still
// ends OK and the volume stays; qemu-server ≥ 9.1.19 uses log_warn instead:
// `WARN: ` and counted, `WARNINGS: n`); with destroy-unreferenced-disks=1 it then
// lists the VMID's volumes on every image storage of the node, which
// activates each storage (an offline one ends the task, `storage 'x' is not
// online`, before the config is removed) and tries each volume left again
// (its error logged bare). A retry frees nothing new and dies the same way.

import { takeVolumeFailure } from "./faults.ts";
import { TaskFailure } from "./errors.ts";
import type { SimCore } from "./router.ts";
import type { VmRecord } from "./state.ts";
import { volumeStorage } from "./storage.ts";
import { destroyWarning } from "./versions.ts";

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

export interface DestroyedDisks {
  /** Warnings the task counts (`log_warn`, qemu-server ≥ 9.1.19): its `WARNINGS: n`. */
  warnings: number;
  /** Lines the worker printed. */
  log: string[];
}

/** A disk left behind, logged as this qemu-server does (versions.ts destroyWarning). */
function warn(core: SimCore, out: DestroyedDisks, text: string): void {
  const w = destroyWarning(core, text);
  out.log.push(w.line);
  out.warnings += w.counted;
}

/**
 * The disk part of a destroy worker: frees what it can, records what it
 * cannot (`core.state.leftovers`), throws TaskFailure like the real worker.
 */
export function destroyDisks(
  core: SimCore,
  vm: VmRecord,
  purgeUnreferenced: boolean,
): DestroyedDisks {
  const done = freed.get(vm) ?? new Set<string>();
  freed.set(vm, done);
  const out: DestroyedDisks = { warnings: 0, log: [] };
  for (const volid of ownedVolumes(vm)) {
    if (done.has(volid)) {
      // Freed by an earlier attempt. The storage plugin only warns (pve-storage
      // Plugin.pm free_image: `disk image '<path>' does not exist`, a plain Perl
      // warn the task does not count), so the task still ends OK. The real node
      // prints the image's path; the simulator has none and names the volume.
      out.log.push(`disk image '${volid}' does not exist`);
      continue;
    }
    const error = takeVolumeFailure(core.faults, volid);
    if (error === undefined) {
      done.add(volid);
      core.state.leftovers.delete(volid);
      continue;
    }
    core.state.leftovers.set(volid, {
      node: vm.node,
      storage: volumeStorage(volid) ?? "",
      vmid: vm.vmid,
    });
    warn(core, out, `Could not remove disk '${volid}', check manually: ${error}`);
  }
  if (!purgeUnreferenced) return out;
  const offline = offlineStorages(core);
  if (offline.length > 0) throw new TaskFailure(`storage '${offline[0]}' is not online`);
  // vdisk_list finds what is left of this VMID and tries it once more.
  for (const [volid, where] of core.state.leftovers) {
    if (where.vmid !== vm.vmid || where.node !== vm.node) continue;
    const error = takeVolumeFailure(core.faults, volid);
    if (error === undefined) core.state.leftovers.delete(volid);
    else warn(core, out, error);
  }
  return out;
}

/** Volumes of this VM that were freed by (possibly failed) destroy tasks. */
export function freedVolumes(vm: VmRecord): string[] {
  return [...(freed.get(vm) ?? [])];
}
