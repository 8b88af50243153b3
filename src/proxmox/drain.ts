// Drain: `kubectl drain` the node from inside its VM, over the guest agent.

import { getLogger } from "@logtape/logtape";
import { commandFailed, runCommand } from "./vm/agent.ts";
import { explainAgentError } from "./vm/guest_caps.ts";
import type { ProxmoxContext } from "./context.ts";
import { type VmAt, vmOf } from "./vm/vm.ts";
import { isTransient } from "./api/errors.ts";
import { pollUntil } from "../async/poll.ts";

const log = getLogger(["bigfleet", "proxmox"]);

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
      if (!isTransient(err) || call + 1 >= timing.actionAttempts || signal.aborted) {
        throw explainAgentError(loc.vmid, err) ?? err;
      }
      return undefined;
    }
  });
  if (res.exitCode !== 0) throw commandFailed(`kubectl drain in VM ${loc.vmid}`, res);
  log.info("drained VM {vmid}", { vmid: loc.vmid, node: loc.node, grace });
}
