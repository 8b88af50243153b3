// Delete: stop and destroy the machine's VM (only while it carries the
// machine's marker), then free the disks the destroy left behind.

import { getLogger } from "@logtape/logtape";
import { BackendError, type HostedMachine } from "../kit/backend.ts";
import type { ProxmoxContext } from "./context.ts";
import {
  DestroyStubError,
  isPermissionError,
  readConfig,
  readStatus,
  stopVm,
  type VmConfig,
  vmOf,
  waitUnlocked,
} from "./vm/vm.ts";
import { followMove, ownedBy, requireHostRef } from "./vm/ownership.ts";
import { isProtected, refusedForProtection, unprotect } from "./vm/protection.ts";
import { destroyVm } from "./vm/destroy.ts";
import { freeLeftovers } from "./vm/volumes.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/**
 * Stop and destroy the machine's VM, then free the disks the destroy could
 * not; a VM that is gone or no longer ours counts as deleted.
 */
export async function deleteVm(
  ctx: ProxmoxContext,
  machine: HostedMachine,
  signal: AbortSignal,
): Promise<void> {
  const { timing } = ctx;
  const ref = requireHostRef(machine);
  const { vmid } = ref;
  let node = ref.node;
  const fields = { vmid, node, machineId: machine.machineId };
  const destroyedByUs = ctx.memory.didDestroy(vmid, machine.machineId);

  // Decide "gone" by reading the VM itself: the listing hides VMs without VM.Audit.
  let config: VmConfig | null | "unreadable";
  try {
    config = await waitUnlocked(vmOf(ctx, ref), timing, signal);
  } catch (err) {
    if (err instanceof DestroyStubError) {
      // Only a destroy's stub is left (its disks are freed): whoever's it is, ours is gone.
      log.warn("{error}", { ...fields, error: err.message });
      return;
    }
    if (!isPermissionError(err)) throw err;
    config = "unreadable";
  }
  if (config === "unreadable" && destroyedByUs) {
    // Our own destroy took it out of the pool the token's rights on it came through.
    log.info("VM {vmid} was destroyed by this provider and is no longer readable: gone", fields);
    return;
  }
  if (config === null) ({ node, config } = await followMove(ctx, vmid, node, signal));
  if (config === null) {
    log.info("VM {vmid} is already gone", fields);
    return;
  }
  if (config === "unreadable") {
    // The VMID may have been reused since our Create: a VM whose marker we
    // cannot read is never destroyed. The operator grants VM.Audit and retries.
    throw new BackendError(
      `cannot read VM ${vmid} on ${node} to verify it carries this machine's marker ` +
        `(permission denied; grant VM.Audit on the pool): refusing to destroy it`,
    );
  }
  if (ownedBy(config, machine.machineId) !== "ours") {
    // The VMID now belongs to something else: our VM is gone, theirs is not ours to touch.
    log.warn(
      "VM {vmid} no longer carries machine {machineId}'s marker; treating as gone",
      fields,
    );
    return;
  }
  // Where it is now (a move was followed above).
  const vm = vmOf(ctx, { node, vmid });
  const st = await readStatus(vm, signal);
  if (st !== null && st.status !== "stopped") await stopVm(vm, timing, signal);
  // Ours by its marker, so protection (inherited or set since) is ours to clear.
  if (isProtected(config)) await unprotect(vm, timing, signal);
  const done = await destroyVm(vm, timing, signal).catch(async (err) => {
    if (signal.aborted || !(await refusedForProtection(vm, err, signal))) throw err;
    await unprotect(vm, timing, signal);
    return await destroyVm(vm, timing, signal);
  });
  ctx.memory.destroyed(vmid, machine.machineId);
  if (done.upid !== null) await freeLeftovers(ctx, vm, done.upid, config, signal);
  if (done.left === "gone") {
    const left = await readConfig(vm, signal).catch((err) => {
      // A pool-scoped token loses its rights on the VMID with the destroy.
      if (isPermissionError(err)) return null;
      throw err;
    });
    if (left !== null) {
      throw new BackendError(`VM ${vmid} still exists on ${node} after its destroy task`);
    }
  }
  log.info("destroyed VM {vmid}", fields);
}
