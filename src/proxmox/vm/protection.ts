// Proxmox's `protection` flag: destroy answers 500 `can't remove VM N -
// protection mode enabled` while it is set (docs/proxmox-notes.md
// "Protection"). Clones inherit it from their template; Create clears it
// with the sizing, and Delete clears it on a VM the marker proves ours.

import { getLogger } from "@logtape/logtape";
import { isTransient, refusedWith } from "../api/errors.ts";
import { pollUntil } from "../../async/poll.ts";
import { readConfig, type VmConfig, vmPath, type VmRef, type VmTiming } from "./vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

export function isProtected(config: VmConfig | null): boolean {
  return config !== null && Number(config.protection ?? 0) !== 0;
}

/** Whether a failed destroy was refused for protection (legacy servers: by the flag). */
export function refusedForProtection(
  vm: VmRef,
  err: unknown,
  signal: AbortSignal,
): Promise<boolean> {
  return refusedWith(
    err,
    /protection mode enabled/,
    async () => isProtected(await readConfig(vm, signal)),
  );
}

/** PUT protection=0; a 596 is answered by reading the flag back. */
export async function unprotect(
  vm: VmRef,
  timing: VmTiming,
  signal: AbortSignal,
): Promise<void> {
  const { api, node, vmid } = vm;
  log.info("VM {vmid} has protection set; clearing it before the destroy", { vmid, node });
  await pollUntil(signal, timing.settleMs, async (call) => {
    try {
      await api.put(`${vmPath(vm)}/config`, { protection: 0 }, signal);
      return true;
    } catch (err) {
      if (!isTransient(err) || call + 1 >= timing.actionAttempts || signal.aborted) throw err;
      return isProtected(await readConfig(vm, signal)) ? undefined : true;
    }
  });
}
