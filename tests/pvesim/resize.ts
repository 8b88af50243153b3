// qemu-server API2/Qemu.pm resize_vm's update, as its worker runs it under
// the config lock: the digest, the VM's lock, the disk (`disk '<d>' does not
// exist`, `you can't resize a cdrom`), Datastore.AllocateSpace on the
// volume's storage, then the new size: `+N[KMGT]` adds to the volume's size,
// `N[KMGT]` is absolute, no unit is bytes; smaller than now is refused
// (`shrinking disks is not supported`), equal does nothing, larger rewrites
// the drive's `size=` (print_drive: the volume first, the other keys sorted;
// pve-common format_size). The volume's storage then counts the new size
// (diskuse.ts). Since PVE 8.0 the call forks a `resize` task (routes/resize.ts).

import { requirePriv } from "./acl.ts";
import { driveBytes, formatSize } from "./capacity.ts";
import { fail } from "./errors.ts";
import type { SimCore } from "./router.ts";
import { driveFile, isCdrom, volumeStorage } from "./storage.ts";

export interface ResizeRequest {
  node: string;
  vmid: number;
  disk: string;
  size: string;
  digest?: string;
}

/** The byte count a `size` parameter asks for, given the volume's size now. */
export function requestedBytes(size: string, current: number): number {
  const m = /^(\+)?(\d+(?:\.\d+)?)([KMGT])?$/.exec(size);
  if (!m) throw fail("internal error");
  const unit = { K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 }[m[3] ?? ""] ?? 1;
  return Math.floor(Number(m[2]) * unit + (m[1] ? current : 0));
}

/** print_drive with a new size: the volume, then every other key sorted. */
function withSize(value: string, bytes: number): string {
  const [file, ...opts] = value.split(",");
  const rest = opts.filter((o) => !o.startsWith("size=")).concat(`size=${formatSize(bytes)}`);
  return [file, ...rest.sort()].join(",");
}

/** resize_vm's $updatefn; throws ApiErrors with PVE's texts. */
export function resizeDisk(core: SimCore, r: ResizeRequest): void {
  const vm = core.state.vmOn(r.node, r.vmid);
  if (r.digest !== undefined && r.digest !== core.state.digest(vm)) {
    throw fail("checksum mismatch (file change by other user?)");
  }
  core.state.checkLock(vm);
  const value = vm.config[r.disk];
  if (value === undefined) throw fail(`disk '${r.disk}' does not exist`);
  const volid = driveFile(value);
  const storage = volumeStorage(volid);
  if (storage === null) throw fail(`unable to parse volume ID '${volid}'`);
  if (isCdrom(value)) throw fail("you can't resize a cdrom");
  requirePriv(core, `/storage/${storage}`, "Datastore.AllocateSpace");
  const current = driveBytes(value);
  const wanted = requestedBytes(r.size, current);
  if (wanted < current) throw fail("shrinking disks is not supported");
  if (wanted === current) return;
  vm.config[r.disk] = withSize(String(value), wanted);
}
