// Storages and the volumes a VM config references, as pve-storage and
// qemu-server see them: which config keys are drives, which drives are
// CD-ROMs or cloud-init, which storage a volume lives on, and whether that
// storage is shared (proxmox-api.md §11 "Local storage").

import type { SimStorage } from "./types.ts";

/** Plugin types pve-storage always marks shared, whatever storage.cfg says. */
const ALWAYS_SHARED = new Set([
  "iscsi",
  "nfs",
  "cifs",
  "rbd",
  "cephfs",
  "iscsidirect",
  "glusterfs",
  "zfs",
  "drbd",
  "pbs",
]);

const DEFAULT_CONTENT: Record<string, string> = {
  dir: "images,rootdir,iso,vztmpl,backup,snippets",
  lvmthin: "images,rootdir",
  lvm: "images,rootdir",
  zfspool: "images,rootdir",
  rbd: "images",
  nfs: "images",
  cifs: "images",
  cephfs: "iso,vztmpl,backup",
};

/** A storage.cfg entry with `shared` resolved the way pve-storage's parser resolves it. */
export interface StorageRecord {
  id: string;
  type: string;
  shared: boolean;
  content: string;
  /** Node restriction; undefined = every node. */
  nodes?: string[];
  totalBytes: number;
  usedBytes: number;
}

const TIB = 1024 ** 4;
const GIB = 1024 ** 3;

/** The storages of a default single-cluster lab: local dir, local-lvm, one Ceph pool. */
export const DEFAULT_STORAGES: SimStorage[] = [
  { id: "local", type: "dir", content: "iso,vztmpl,backup,snippets" },
  { id: "local-lvm", type: "lvmthin" },
  { id: "ceph-vm", type: "rbd" },
];

export function storageRecord(s: SimStorage): StorageRecord {
  return {
    id: s.id,
    type: s.type,
    shared: ALWAYS_SHARED.has(s.type) || s.shared === true,
    content: s.content ?? DEFAULT_CONTENT[s.type] ?? "images",
    nodes: s.nodes ? [...s.nodes] : undefined,
    totalBytes: s.totalBytes ?? TIB,
    usedBytes: s.usedBytes ?? 50 * GIB,
  };
}

export function availableOn(s: StorageRecord, node: string): boolean {
  return s.nodes === undefined || s.nodes.includes(node);
}

/** Config keys that hold drives (qemu-server valid_drive_names). */
export function isDriveKey(key: string): boolean {
  return /^(ide([0-3])|sata([0-5])|scsi([0-9]|[1-2][0-9]|30)|virtio([0-9]|1[0-5]))$/.test(key) ||
    key === "efidisk0" || key === "tpmstate0";
}

/** The volume part of a drive property string (its first element, or `file=`). */
export function driveFile(value: string | number): string {
  const parts = String(value).split(",");
  const file = parts.find((p) => p.startsWith("file="));
  return file ? file.slice(5) : parts[0];
}

export function isCdrom(value: string | number): boolean {
  return String(value).split(",").includes("media=cdrom");
}

/** qemu-server drive_is_cloudinit: the volume is named `[vm-N-]cloudinit`. */
export function isCloudinit(value: string | number): boolean {
  return /[:/](?:vm-\d+-|base-\d+-)?cloudinit(?:\.(?:raw|qcow2|vmdk))?$/.test(driveFile(value));
}

/** pve-storage parse_volume_id: the storage id of `sid:volname`, or null. */
export function volumeStorage(volid: string): string | null {
  const m = volid.match(/^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$/i);
  return m ? m[1] : null;
}

export interface VolumeRef {
  key: string;
  volid: string;
  storage: string | null;
  cdrom: boolean;
}

/** Every drive of a config that names a volume (`none` and the physical `cdrom` do not). */
export function volumesOf(config: Record<string, string | number>): VolumeRef[] {
  const out: VolumeRef[] = [];
  for (const [key, value] of Object.entries(config)) {
    if (!isDriveKey(key)) continue;
    const volid = driveFile(value);
    if (volid === "" || volid === "none" || volid === "cdrom") continue;
    out.push({ key, volid, storage: volumeStorage(volid), cdrom: isCdrom(value) });
  }
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}
