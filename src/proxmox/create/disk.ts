// Create's disk step: the boot disk grown to the instance type's `disk_gib`
// with `PUT …/resize` (VM.Config.Disk; docs/proxmox-notes.md "Disks and
// clone targets"). A disk is never shrunk: one already as large or larger
// (an adopted VM grown before, a template larger than the type says) is left
// as it is, so a retry changes nothing. Proxmox grows the volume of a
// running VM live, so nothing is stopped for it.

import { getLogger } from "@logtape/logtape";
import type { InstanceType } from "../../config/types.ts";
import { BackendError } from "../../kit/backend.ts";
import { sleep } from "../../async/sleep.ts";
import { isTransient, serverTextOf } from "../api/errors.ts";
import { waitTask } from "../api/tasks.ts";
import type { ProxmoxContext } from "../context.ts";
import { bootDisk, driveBytes } from "../vm/drives.ts";
import { isPermissionError, type Located, readConfig, vmOf, vmPath } from "../vm/vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

const GIB = 1024 ** 3;

/** Grow the VM's boot disk to the type's disk_gib, unless it is that large already. */
export async function growBootDisk(
  ctx: ProxmoxContext,
  loc: Located,
  type: InstanceType,
  machineId: string,
  signal: AbortSignal,
): Promise<void> {
  const gib = type.diskGib;
  if (gib === undefined) return;
  const { api, timing } = ctx;
  const vm = vmOf(ctx, loc);
  const what = `VM ${loc.vmid} on ${loc.node}`;
  /** The boot disk as the config shows it now, and whether it still needs to grow. */
  const look = async () => {
    const config = await readConfig(vm, signal);
    if (config === null) throw new BackendError(`${what} vanished before its disk was grown`);
    const boot = bootDisk(config);
    if (boot === null) {
      throw new BackendError(`${what} has no disk to grow to disk_gib ${gib} of ${type.name}`);
    }
    return { ...boot, bytes: driveBytes(boot.value) };
  };
  let disk = await look();
  if (disk.bytes >= gib * GIB) return leftAsIs(disk, gib, what, machineId);
  for (let call = 0;; call++) {
    try {
      // Absolute, so a repeat after a lost answer is a no-op; PVE ≥ 8 answers a task, older null.
      const upid = await api.put(
        `${vmPath(loc)}/resize`,
        { disk: disk.key, size: `${gib}G` },
        signal,
      );
      if (typeof upid === "string") {
        const key = disk.key;
        await waitTask(api, upid, {
          what: `growing ${key} of VM ${loc.vmid}`,
          timing: timing.task,
          // Read when the task cannot be (a token rotated away): the disk at its new size.
          effect: async (signal) => {
            const config = await readConfig(vm, signal);
            if (config === null) return { failed: `${what} vanished` };
            return driveBytes(config[key]) >= gib * GIB ? "done" : undefined;
          },
        }, signal);
      }
      break;
    } catch (err) {
      if (signal.aborted) throw err;
      // Larger by now (someone grew it meanwhile): the same as found larger.
      if (/shrinking disks is not supported/.test(serverTextOf(err))) return;
      if (!isTransient(err) || call + 1 >= timing.actionAttempts) {
        throw resizeFailed(err, disk.key, gib, what);
      }
      await sleep(timing.settleMs, signal);
      disk = await look();
      if (disk.bytes >= gib * GIB) break;
    }
  }
  log.info("grew boot disk {disk} of VM {vmid} to {gib} GiB for machine {machineId}", {
    disk: disk.key,
    vmid: loc.vmid,
    node: loc.node,
    gib,
    machineId,
  });
}

/** A disk at least as large as disk_gib: nothing to do; larger is said, since it is never shrunk. */
function leftAsIs(
  disk: { key: string; bytes: number },
  gib: number,
  what: string,
  machineId: string,
): void {
  if (disk.bytes <= gib * GIB) return;
  log.warn(
    "boot disk {disk} of {what} is {have} GiB, larger than disk_gib {gib}; left as it is " +
      "(Proxmox never shrinks a disk: the template's disk is larger than the type says)",
    { disk: disk.key, what, have: Math.ceil(disk.bytes / GIB), gib, machineId },
  );
}

function resizeFailed(err: unknown, key: string, gib: number, what: string): BackendError {
  const hint = isPermissionError(err)
    ? " (the token needs VM.Config.Disk on the pool: setup-token.sh --resize-disks)"
    : "";
  return new BackendError(
    `growing boot disk ${key} of ${what} to ${gib} GiB failed: ${(err as Error).message}${hint}`,
  );
}
