// What happens to a VM after Create picked it: start it and wait for its guest
// agent, deliver the bootstrap and run the hook, drain the node, destroy it.

import { getLogger } from "@logtape/logtape";
import type { Config } from "../config/types.ts";
import { BackendError, type HostedMachine } from "../kit/backend.ts";
import { agentEnabled, commandFailed, runCommand, waitForAgent, writeGuestFile } from "./agent.ts";
import { type ProxmoxContext, vmOf } from "./context.ts";
import { isTransient } from "./errors.ts";
import { followMove, ownedBy, requireHostRef } from "./ownership.ts";
import { isProtected, refusedForProtection, unprotect } from "./protection.ts";
import { pollUntil } from "../async/poll.ts";
import { destroyVm } from "./destroy.ts";
import { freeLeftovers } from "./volumes.ts";
import {
  DestroyStubError,
  isPermissionError,
  readConfig,
  readStatus,
  startVm,
  stopVm,
  type VmAt,
  type VmConfig,
  waitUnlocked,
} from "./vm.ts";

/** Where the bootstrap goes in the guest and the hook that runs it. */
export type BootstrapHook = Pick<Config, "bootstrapPath" | "bootstrapExec">;

/** One Configure's delivery: the hook, the machine it is for and its bootstrap (a secret). */
export interface Bootstrap {
  hook: BootstrapHook;
  machineId: string;
  bootstrap: Uint8Array;
}

const log = getLogger(["bigfleet", "proxmox"]);

/** Start a stopped VM and wait for its guest agent. */
export async function ensureRunning(
  ctx: ProxmoxContext,
  at: VmAt,
  signal: AbortSignal,
): Promise<void> {
  const { timing } = ctx;
  const vm = vmOf(ctx, at);
  const { node, vmid } = vm;
  const config = await waitUnlocked(vm, timing, signal);
  if (config === null) throw new BackendError(`VM ${vmid} does not exist on node ${node}`);
  if (!agentEnabled(config.agent)) {
    throw new BackendError(`VM ${vmid} does not enable the QEMU guest agent (config 'agent')`);
  }
  const st = await readStatus(vm, signal);
  if (st === null) throw new BackendError(`VM ${vmid} does not exist on node ${node}`);
  const starting = st.status !== "running";
  if (starting) {
    log.info("starting VM {vmid} on {node}", { vmid, node, status: st.status });
    await startVm(vm, timing, signal);
  }
  const polls = await waitForAgent(
    vm,
    {
      pollMs: timing.agentPollMs,
      timeoutMs: timing.agentTimeoutMs,
      firstMs: starting ? Math.min(timing.agentPollMs, timing.agentFirstPollMs) : 0,
    },
    signal,
  );
  log.debug("guest agent of VM {vmid} answered after {polls} polls", { vmid, node, polls });
}

/** Write the bootstrap into the guest and run the hook on it, exactly once. */
export async function runBootstrap(
  ctx: ProxmoxContext,
  at: VmAt,
  job: Bootstrap,
  signal: AbortSignal,
): Promise<void> {
  const { timing } = ctx;
  const vm = vmOf(ctx, at);
  const path = job.hook.bootstrapPath;
  const { parts } = await writeGuestFile(vm, path, job.bootstrap, timing.exec, signal);
  log.info("bootstrap delivered to VM {vmid} ({bytes} bytes in {parts} writes); running hook", {
    vmid: vm.vmid,
    node: vm.node,
    machineId: job.machineId,
    bytes: job.bootstrap.length,
    parts,
  });
  const argv = [...job.hook.bootstrapExec, path];
  let res;
  try {
    res = await runCommand(vm, argv, timing.exec, signal);
  } catch (err) {
    if (isTransient(err)) {
      // exec is not idempotent: a second hook run could join the node twice.
      throw new BackendError(
        `bootstrap hook in VM ${vm.vmid}: lost track of the exec (${
          (err as Error).message
        }); not re-running it`,
      );
    }
    throw err;
  }
  if (res.exitCode !== 0) throw commandFailed(`bootstrap hook ${argv[0]} in VM ${vm.vmid}`, res);
}

/**
 * kubectl's --timeout, in seconds: the grace period plus two minutes, at
 * least ten minutes, but ending a margin (a fifteenth of the kit's Drain
 * timeout, at most a minute) before the kit gives up, so a drain that runs
 * out reports kubectl's own error. With the default 15m: 600–840 s.
 */
export function kubectlDrainTimeout(grace: number, drainTimeoutMs: number): number {
  const budget = Math.floor(drainTimeoutMs / 1000);
  const margin = Math.min(60, Math.ceil(budget / 15));
  return Math.max(1, Math.min(Math.max(600, grace + 120), budget - margin));
}

/** `kubectl drain` the node from inside its VM, repeated on transient failures. */
export async function drainNode(
  ctx: ProxmoxContext,
  loc: VmAt,
  graceSeconds: bigint,
  drainTimeoutMs: number,
  signal: AbortSignal,
): Promise<void> {
  const { timing } = ctx;
  const vm = vmOf(ctx, loc);
  // Negative grace: kubectl's own default (-1 = each pod's terminationGracePeriodSeconds).
  const grace = graceSeconds < 0n ? -1 : Number(graceSeconds > 86_400n ? 86_400n : graceSeconds);
  const timeout = kubectlDrainTimeout(grace, drainTimeoutMs);
  const cmd = `kubectl drain "$(hostname)" --ignore-daemonsets --delete-emptydir-data` +
    ` --grace-period=${grace} --timeout=${timeout}s`;
  const res = await pollUntil(signal, timing.settleMs, async (call) => {
    try {
      return await runCommand(vm, ["/bin/sh", "-c", cmd], timing.exec, signal);
    } catch (err) {
      // A drain is safe to repeat, unlike the bootstrap hook.
      if (!isTransient(err) || call + 1 >= timing.actionAttempts || signal.aborted) throw err;
      return undefined;
    }
  });
  if (res.exitCode !== 0) throw commandFailed(`kubectl drain in VM ${loc.vmid}`, res);
  log.info("drained VM {vmid}", { vmid: loc.vmid, node: loc.node, grace });
}

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
  if (done.upid !== null) await freeLeftovers(ctx, vm, done.upid, signal);
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
