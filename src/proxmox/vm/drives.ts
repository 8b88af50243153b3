// A VM config's drives (disks, CD-ROMs, the cloud-init drive, EFI and TPM
// state): which keys are drives, the volume each names and its size, the
// volumes a destroy frees, and which drive is the boot disk
// (docs/proxmox-notes.md "Disks and clone targets"): the first disk
// `boot: order=` names, else the legacy `bootdisk`, else the first disk in
// qemu-server's drive order. CD-ROMs (ISOs, the cloud-init drive) and empty
// drives are never the boot disk.

import type { VmConfig } from "./vm.ts";

/** A drive of a config that names a volume. */
export interface Volume {
  key: string;
  volid: string;
  /** The storage id of `storage:name`; null for a path (not a storage volume). */
  storage: string | null;
}

/** Config keys qemu-server treats as drives. */
export function isDriveKey(key: string): boolean {
  return /^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$/
    .test(key);
}

/** The volume a drive value names: its first element, `file=` or bare. */
function volumeOf(key: string, value: string): Volume | null {
  const volid = driveVolume(value);
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

/** The drives qemu-server may boot from, in its order (ide, sata, scsi, virtio). */
const BOOT_KEYS = [
  ...Array.from({ length: 4 }, (_, i) => `ide${i}`),
  ...Array.from({ length: 6 }, (_, i) => `sata${i}`),
  ...Array.from({ length: 31 }, (_, i) => `scsi${i}`),
  ...Array.from({ length: 16 }, (_, i) => `virtio${i}`),
];

/** A drive value's volume (its first element, `file=` or bare). */
export function driveVolume(value: unknown): string {
  const first = String(value).split(",")[0];
  return first.startsWith("file=") ? first.slice(5) : first;
}

/** A CD-ROM drive (an ISO, the cloud-init drive, the host's `cdrom`). */
export function isCdrom(value: unknown): boolean {
  return /(?:^|,)media=cdrom(?:,|$)/.test(String(value)) || driveVolume(value) === "cdrom";
}

/** `size=32G` of a drive (K/M/G/T are powers of 1024; bare is bytes); 0 when absent. */
export function driveBytes(value: unknown): number {
  const m = /(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)(?:,|$)/.exec(String(value));
  if (!m) return 0;
  const power = { "": 0, K: 1, M: 2, G: 3, T: 4 }[m[2]] ?? 0;
  return Math.round(Number(m[1]) * 1024 ** power);
}

/** The boot disk of a config: its key and value; null when the VM has no disk. */
export function bootDisk(config: VmConfig): { key: string; value: string } | null {
  const isDisk = (k: string) =>
    BOOT_KEYS.includes(k) && typeof config[k] === "string" && !isCdrom(config[k]) &&
    !["", "none"].includes(driveVolume(config[k]));
  const order = /(?:^|,)order=([^,]*)/.exec(String(config.boot ?? ""))?.[1].split(";") ?? [];
  const key = [...order, String(config.bootdisk ?? ""), ...BOOT_KEYS].find(isDisk);
  return key === undefined ? null : { key, value: String(config[key]) };
}
