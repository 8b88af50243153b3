// Where a clone's disks go and what links them (qemu-server API2/Qemu.pm
// clone_vm and QemuServer clone_disk, pve-storage's plugins):
// - `storage` must exist, be enabled on the source node and hold `images`
//   (400 `storage 'x' does not support vm images`), checked before the fork;
// - `format`: file storages (dir, nfs, cifs, glusterfs) take raw, qcow2 and
//   vmdk; every other type raw only, and a format it cannot take silently
//   becomes the storage's default (raw); without `format` a file storage keeps
//   the source volume's format;
// - a linked clone needs a base volume (a template's) on a storage with the
//   `clone` feature (not LVM-thick, not iSCSI): else `Linked clone feature is
//   not supported for drive '<key>'` (PVE 8) / `… for '<volid>' (<key>)` (PVE 9);
//   the cloud-init drive is always copied;
// - a linked volume names its base on file, RBD and ZFS storages
//   (`base-9000-disk-0/vm-100-disk-0`, `9000/base-9000-disk-0.raw/100/
//   vm-100-disk-0.qcow2`, always qcow2), but not on LVM-thin (a thin snapshot
//   `vm-100-disk-0`, untracked by PVE);
// - destroying a template whose base a linked clone still uses fails in the
//   task, `base volume '<volid>' is still in use by linked cloned`, where PVE
//   can see the link (not on LVM-thin).
// The task log names each drive: `create full|linked clone of drive <key> (<volid>)`.

import { fail, paramError, TaskFailure } from "./errors.ts";
import { driveBytes } from "./capacity.ts";
import { recordVolume } from "./diskuse.ts";
import type { SimCore } from "./router.ts";
import type { ConfigValue, VmRecord } from "./state.ts";
import {
  availableOn,
  driveFile,
  isCdrom,
  isCloudinit,
  isDriveKey,
  type StorageRecord,
  volumeStorage,
} from "./storage.ts";

/** What the clone asked for, as clone.ts holds it. */
export interface CloneTarget {
  node: string;
  newid: number;
  full: boolean;
  target?: string;
  storage?: string;
  format?: string;
}

const FILE_TYPES = new Set(["dir", "nfs", "cifs", "glusterfs", "btrfs"]);
const FILE_FORMATS = ["raw", "qcow2", "vmdk"];
const NO_CLONE_FEATURE = new Set(["lvm", "iscsi", "iscsidirect", "drbd"]);

/** pve-storage storage_check_enabled (via storage_config and storage_check_node). */
export function storageFor(core: SimCore, id: string, node?: string): StorageRecord {
  const s = core.state.storages.get(id);
  if (!s) throw fail(`storage '${id}' does not exist`);
  if (node !== undefined && !availableOn(s, node)) {
    throw fail(`storage '${id}' is not available on node '${node}'`);
  }
  return s;
}

/** clone_vm's `storage` checks, before the fork. */
export function checkCloneStorage(core: SimCore, a: CloneTarget): void {
  if (a.storage === undefined) return;
  const s = storageFor(core, a.storage, a.node);
  if (!s.content.split(",").includes("images")) {
    throw paramError({ storage: `storage '${a.storage}' does not support vm images` });
  }
  if (a.target === undefined) return;
  storageFor(core, a.storage, a.target);
  if (!s.shared) throw fail(`can't clone to non-shared storage '${a.storage}'`);
}

/** The last element of a volume name (`[<vmid>/]<name>[.<fmt>]`; a linked one's after its base). */
function parseVolname(volid: string): { name: string; fmt: string } {
  const last = volid.slice(volid.indexOf(":") + 1).split("/").at(-1)!;
  const m = /^(.*?)(?:\.(raw|qcow2|vmdk))?$/.exec(last)!;
  return { name: m[1], fmt: m[2] ?? "raw" };
}

/** The drives a clone copies or links, sorted: disks and cloud-init, not CD-ROMs, `none`, `cdrom`. */
export function clonedDrives(config: Record<string, ConfigValue>): string[] {
  return Object.keys(config).filter((k) => {
    if (!isDriveKey(k) || /^unused\d+$/.test(k)) return false;
    const file = driveFile(config[k]);
    if (file === "none" || file === "cdrom" || file === "") return false;
    return !isCdrom(config[k]) || isCloudinit(config[k]);
  }).sort();
}

/** volume_has_feature('clone'): a base volume on a storage that can clone. */
function canLink(core: SimCore, volid: string): boolean {
  const s = core.state.storages.get(volumeStorage(volid) ?? "");
  if (!s || NO_CLONE_FEATURE.has(s.type)) return false;
  return parseVolname(volid).name.startsWith("base-");
}

/** clone_vm's per-drive feature check (before the fork, and again in the worker). */
export function checkCloneFeatures(
  core: SimCore,
  config: Record<string, ConfigValue>,
  full: boolean,
): void {
  if (full) return;
  for (const key of clonedDrives(config)) {
    if (isCloudinit(config[key])) continue;
    const volid = driveFile(config[key]);
    if (canLink(core, volid)) continue;
    const v9 = Number(core.pveVersion.split(".")[0]) >= 9;
    throw fail(
      v9
        ? `Linked clone feature is not supported for '${volid}' (${key})`
        : `Linked clone feature is not supported for drive '${key}'`,
    );
  }
}

/** resolve_dst_disk_format: the format the new volume gets on `s`. */
function targetFormat(s: StorageRecord, asked: string | undefined, srcFmt: string): string {
  const valid = FILE_TYPES.has(s.type) && s.type !== "btrfs" ? FILE_FORMATS : ["raw"];
  const want = asked ?? (FILE_TYPES.has(s.type) ? srcFmt : "raw");
  return valid.includes(want) ? want : "raw";
}

/** find_free_diskname among the names this clone has taken so far. */
function freeDisk(newid: number, taken: Set<string>): string {
  let n = 0;
  while (taken.has(`vm-${newid}-disk-${n}`)) n++;
  const name = `vm-${newid}-disk-${n}`;
  taken.add(name);
  return name;
}

/** The new drive value for `key` and the log line clone_disk prints. */
export function cloneVolume(
  core: SimCore,
  config: Record<string, ConfigValue>,
  key: string,
  a: CloneTarget,
  taken: Set<string>,
): { value: string; log: string } {
  const [volid, ...opts] = String(config[key]).split(",");
  const rest = opts.length > 0 ? `,${opts.join(",")}` : "";
  const from = volumeStorage(volid) ?? "local-lvm";
  const src = parseVolname(volid);
  const ci = isCloudinit(config[key]);
  const linked = !a.full && !ci;
  const sid = linked ? from : a.storage ?? from;
  const s = storageFor(core, sid);
  const file = FILE_TYPES.has(s.type);
  let out: string;
  if (linked) {
    const name = freeDisk(a.newid, taken);
    const base = volid.slice(sid.length + 1);
    out = file
      ? `${sid}:${base}/${a.newid}/${name}.qcow2`
      : s.type === "lvmthin"
      ? `${sid}:${name}`
      : `${sid}:${base}/${name}`;
  } else {
    const fmt = targetFormat(s, a.format, src.fmt);
    const name = ci ? `vm-${a.newid}-cloudinit` : freeDisk(a.newid, taken);
    out = file ? `${sid}:${a.newid}/${name}.${fmt}` : `${sid}:${name}`;
  }
  recordVolume(core.state, out, linked ? driveBytes(config[key]) : undefined);
  const kind = linked ? "linked" : "full";
  return { value: out + rest, log: `create ${kind} clone of drive ${key} (${volid})` };
}

/** destroy_vm on a template: a base volume a linked clone still names (where PVE can tell). */
export function assertBaseUnused(core: SimCore, vm: VmRecord): void {
  if (!Number(vm.config.template ?? 0)) return;
  for (const key of clonedDrives(vm.config)) {
    const volid = driveFile(vm.config[key]);
    if (!parseVolname(volid).name.startsWith("base-")) continue;
    const prefix = `${volid}/`;
    for (const other of core.state.vms.values()) {
      if (other === vm) continue;
      if (Object.values(other.config).some((v) => String(v).startsWith(prefix))) {
        throw new TaskFailure(`base volume '${volid}' is still in use by linked cloned`);
      }
    }
  }
}
