// Destroying a VM on a real cluster's terms (docs/proxmox-notes.md "Destroy
// and offline storages", "Destroy and leaked volumes", "Pool-scoped tokens"):
// an offline storage under destroy-unreferenced-disks, a destroy that dies on
// its `lock: destroyed` stub, and a token whose rights on the VMID came
// through the pool, which destroy_vm drops before the config goes, so every
// read of the VMID after our own destroy is a 403 rather than "no such VM".

import { getLogger } from "@logtape/logtape";
import { isStorageProblem, isTransient, serverTextOf, TaskFailedError } from "../api/errors.ts";
import { type Effect, waitTask } from "../api/tasks.ts";
import { pollUntil, pollWithin } from "../../async/poll.ts";
import {
  isMissingHere,
  isPermissionError,
  readConfig,
  readStatus,
  stopVm,
  type VmConfig,
  vmPath,
  type VmRef,
  type VmTiming,
} from "./vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** How a destroy ended: the VM gone, or only root can remove its `lock: destroyed` stub. */
export interface Destroyed {
  left: "gone" | "stub";
  /** The last destroy task started, whose log names the disks it could not free; null when unknown. */
  upid: string | null;
}

/**
 * Destroy a stopped VM with purge and unreferenced disks, and wait until its
 * config is gone. Resolves also when it was already missing, and when only
 * a dead destroy's stub is left (logged with how to remove it).
 *
 * destroy-unreferenced-disks=1 makes PVE activate every image storage of the
 * node; one offline storage fails the task after the referenced disks were
 * freed, on every retry. Such a failure is retried once without the flag,
 * which removes the VM; disks only an unreferenced sweep would have found are
 * left for the operator.
 *
 * Once our DELETE was sent, a 403 on the VMID means the destroy got as far as
 * taking it out of its pool: for a token whose rights on it came through the
 * pool, that is what gone looks like.
 */
export async function destroyVm(
  vm: VmRef,
  timing: VmTiming,
  signal: AbortSignal,
): Promise<Destroyed> {
  const { api, node, vmid } = vm;
  let sweep = true;
  let storageError = "";
  let upid: string | null = null;
  /** A DELETE of ours may have been carried out (it started a task, or its answer was lost). */
  let sent = false;
  const gone = (): Destroyed => ({ left: "gone", upid });
  /** A 403 after our DELETE: the destroy took the VMID out of the pool the token's rights came through. */
  const goneIf403 = (e: unknown) => {
    if (sent && isPermissionError(e)) return null;
    throw e;
  };
  const attempt = async (call: number): Promise<Destroyed | undefined> => {
    const query = sweep ? { purge: 1, "destroy-unreferenced-disks": 1 } : { purge: 1 };
    try {
      upid = String(
        await api.del(vmPath(vm), query, signal).catch((e) => {
          if (isTransient(e)) sent = true;
          throw e;
        }),
      );
      sent = true;
      await waitTask(api, upid, {
        what: `destroy of VM ${vmid}`,
        timing: timing.task,
        effect: destroyEffect(vm, timing),
      }, signal);
      if (!sweep) {
        log.warn(
          "destroyed VM {vmid} without destroy-unreferenced-disks ({error}); disks of VM " +
            "{vmid} that its config did not reference may remain on that storage: remove " +
            "them by hand once it is back",
          { vmid, node, error: storageError },
        );
      }
      return gone();
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      if ((sent && isPermissionError(err)) || await isMissingHere(vm, err, signal)) {
        return gone();
      }
      const text = serverTextOf(err);
      if (sweep && err instanceof TaskFailedError && isStorageProblem(text)) {
        log.warn(
          "destroy of VM {vmid} failed on a storage problem ({error}); retrying without " +
            "destroy-unreferenced-disks",
          { vmid, node, error: text },
        );
        sweep = false;
        storageError = text;
        return await attempt(call); // at once, and as the same attempt
      }
      // The destroy may have happened behind a 596, or someone restarted the VM.
      const st = await readStatus(vm, signal).catch(goneIf403);
      if (st === null) return gone();
      if (st.lock === "destroyed") return await outlastStub(vm, timing, err, signal);
      const retryable = isTransient(err) || /is running - destroy failed|VM is locked/i.test(text);
      if (!retryable || call + 1 >= timing.actionAttempts) throw err;
      log.warn("destroy of VM {vmid} did not complete; re-reading its state", {
        vmid,
        node,
        error: (err as Error).message,
      });
      if (st.status !== "stopped") await stopVm(vm, timing, signal);
      return undefined;
    }
  };
  const result = await pollUntil(signal, timing.settleMs, attempt);
  return { ...result, upid };
}

/**
 * What a destroy did, read from the VM when its task cannot be read: done
 * once the config is gone (or, for a pool-scoped token, unreadable: the
 * destroy took it out of the pool); a `lock: destroyed` stub that stays past
 * destroyedGraceMs is a destroy that died (outlastStub takes it from there).
 */
function destroyEffect(vm: VmRef, timing: VmTiming): (signal: AbortSignal) => Promise<Effect> {
  let stubSince: number | null = null;
  return async (signal) => {
    let config: VmConfig | null;
    try {
      config = await readConfig(vm, signal);
    } catch (err) {
      if (isPermissionError(err)) return "done";
      throw err;
    }
    if (config === null) return "done";
    if (config.lock !== "destroyed") return undefined;
    stubSince ??= Date.now();
    if (Date.now() - stubSince < timing.destroyedGraceMs) return undefined;
    return { failed: "it left the config as lock: destroyed" };
  };
}

/**
 * The VM shows destroy_vm's stub (`lock: destroyed`: disks freed, config not
 * yet removed). A live destroy removes it within moments; one still there
 * after destroyedGraceMs belongs to a task that died, and stays until root
 * removes it. Either way the VM's disks are gone.
 */
async function outlastStub(
  vm: VmRef,
  timing: VmTiming,
  cause: unknown,
  signal: AbortSignal,
): Promise<Destroyed> {
  const { node, vmid } = vm;
  const vanished = await pollWithin(signal, timing.settleMs, timing.destroyedGraceMs, async () => {
    try {
      return (await readConfig(vm, signal)) === null ? true : undefined;
    } catch (err) {
      if (isPermissionError(err)) return true; // out of the pool: the destroy went on
      throw err;
    }
  });
  if (vanished) return { left: "gone", upid: null };
  log.warn(
    "VM {vmid} on {node} is left with lock: destroyed: its destroy ended ({error}) after " +
      "freeing its disks but before removing its config, so the VMID stays taken; only root " +
      "can remove it: qm unlock {vmid} && qm destroy {vmid} on {node}",
    { vmid, node, error: serverTextOf(cause) || (cause as Error).message },
  );
  return { left: "stub", upid: null };
}
