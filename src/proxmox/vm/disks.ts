// A VM's drives as its config names them: which keys are drives, a drive's
// size, and which one is the boot disk (docs/proxmox-notes.md "Disks and
// clone targets"): the first disk `boot: order=` names, else the legacy
// `bootdisk`, else the first disk in qemu-server's drive order. CD-ROMs
// (ISOs, the cloud-init drive) and empty drives are never the boot disk.

import type { VmConfig } from "./vm.ts";

/** Config keys qemu-server treats as drives. */
export function isDriveKey(key: string): boolean {
  return /^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$/
    .test(key);
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
