// The volumes a VM config names: its drives (disks, CD-ROMs, the cloud-init
// drive, EFI and TPM state) and, for what a destroy frees, its unused disks.

import type { VmConfig } from "./vm.ts";

/** A drive of a config that names a volume. */
export interface Volume {
  key: string;
  volid: string;
  /** The storage id of `storage:name`; null for a path (not a storage volume). */
  storage: string | null;
}

/** Config keys qemu-server treats as drives. */
function isDriveKey(key: string): boolean {
  return /^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$/
    .test(key);
}

/** The volume a drive value names: its first element, `file=` or bare. */
function volumeOf(key: string, value: string): Volume | null {
  const first = value.split(",")[0];
  const volid = first.startsWith("file=") ? first.slice(5) : first;
  if (volid === "" || volid === "none" || volid === "cdrom") return null;
  const m = volid.match(/^([a-z][a-z0-9\-_.]*[a-z0-9]):./i);
  return { key, volid, storage: m ? m[1] : null };
}

/** Every volume the config's drives use; `none` and the host's physical `cdrom` use none. */
export function driveVolumes(config: VmConfig): Volume[] {
  const out: Volume[] = [];
  for (const [key, value] of Object.entries(config)) {
    if (!isDriveKey(key) || typeof value !== "string") continue;
    const v = volumeOf(key, value);
    if (v !== null) out.push(v);
  }
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * The storage volumes VM `vmid` owns (the ones its destroy frees): its
 * drives' and unused disks' volumes named after it (`vm-<vmid>-…`, a linked
 * clone's `…/vm-<vmid>-…`), not an ISO or another VM's base image.
 */
export function ownedVolumes(config: VmConfig, vmid: number): Volume[] {
  const owned = new RegExp(`(?:^|[:/])(?:vm|base)-${vmid}-`);
  const unused = Object.entries(config)
    .filter(([key, value]) => /^unused\d+$/.test(key) && typeof value === "string")
    .map(([key, value]) => volumeOf(key, String(value)))
    .filter((v): v is Volume => v !== null);
  return [...driveVolumes(config), ...unused].filter((v) =>
    v.storage !== null && owned.test(v.volid.slice(v.storage.length + 1))
  );
}
