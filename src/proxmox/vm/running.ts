// A VM that runs with its guest agent answering: what Create ends with and
// what Configure and Drain need before they talk to the guest.

import { getLogger } from "@logtape/logtape";
import { BackendError } from "../../kit/backend.ts";
import { agentEnabled, waitForAgent } from "./agent.ts";
import type { ProxmoxContext } from "../context.ts";
import { readStatus, startVm, type VmAt, vmOf, waitUnlocked } from "./vm.ts";

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
