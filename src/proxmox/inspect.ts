// InspectVM: what `machines recover` needs to know about a machine's VM before
// an operator destroys or adopts it. The VM is the one on record if it still
// carries the machine's marker, else the one describe finds by marker (a crash
// may have left it unrecorded). Reads only; the agent is asked once, briefly.

import type { InstanceType } from "../config/types.ts";
import type { HostInspection, InspectedMachine } from "../kit/backend.ts";
import { waitForAgent } from "./vm/agent.ts";
import type { ProxmoxContext } from "./context.ts";
import { readConfig, readPending, readStatus, type VmConfig, vmOf } from "./vm/vm.ts";
import { describeManaged } from "./describe.ts";
import { hostRefOf, parseHostRef } from "./naming.ts";
import { ownedBy } from "./vm/ownership.ts";

/** How long an inspection waits for the guest agent's ping. */
const AGENT_CHECK_MS = 10_000;

export async function inspectVm(
  ctx: ProxmoxContext,
  type: InstanceType | undefined,
  machine: InspectedMachine,
  signal: AbortSignal,
): Promise<HostInspection | null> {
  const found = await locate(ctx, machine, signal);
  if (found === null) return null;
  const { node, vmid, config } = found;
  const vm = vmOf(ctx, found);
  const problems: string[] = [];
  const lock = typeof config.lock === "string" && config.lock !== "" ? config.lock : null;
  if (lock !== null) problems.push(`it is locked (${lock})`);
  const status = (await readStatus(vm, signal))?.status ?? "gone";
  if (status !== "running") problems.push(`it is ${status}, not running`);
  // GET config shows pending values as applied: the size a running VM has is the current one
  // (docs/proxmox-notes.md "Pending changes").
  const { vcpu, memoryMib } = sizeOf((await readPending(vm, signal))?.current ?? config);
  if (type === undefined) {
    problems.push(`instance type ${machine.instanceType} is not in the catalog`);
  } else if (vcpu !== type.vcpu || memoryMib !== type.memoryMib) {
    problems.push(
      `it has ${vcpu} vCPU / ${memoryMib} MiB, ${type.name} is ${type.vcpu} / ${type.memoryMib}`,
    );
  }
  let agent = "agent not asked";
  if (lock === null && status === "running") {
    try {
      const pollMs = ctx.timing.agentPollMs;
      const timeoutMs = Math.min(ctx.timing.agentTimeoutMs, AGENT_CHECK_MS);
      await waitForAgent(vm, { pollMs, timeoutMs }, signal);
      agent = "agent answers";
    } catch (err) {
      if (signal.aborted) throw err;
      agent = "agent silent";
      problems.push(`its guest agent does not answer (${(err as Error).message})`);
    }
  }
  return {
    hostRef: hostRefOf(node, vmid),
    summary: `VM ${vmid} on ${node}: ${status}${
      lock ? ` (locked: ${lock})` : ""
    }, ${vcpu} vCPU / ${memoryMib} MiB, ${agent}`,
    problems,
  };
}

/** The machine's VM: the one on record while it is still the machine's, else one by marker. */
async function locate(
  ctx: ProxmoxContext,
  machine: InspectedMachine,
  signal: AbortSignal,
): Promise<{ node: string; vmid: number; config: VmConfig } | null> {
  const ref = parseHostRef(machine.hostRef);
  if (ref !== null) {
    const config = await readConfig(vmOf(ctx, ref), signal);
    if (config !== null && ownedBy(config, machine.machineId) === "ours") {
      return { ...ref, config };
    }
  }
  // Moved, or never recorded: the cluster's listing and each VM's marker decide.
  const hit = (await describeManaged(ctx, signal))
    .filter((vm) => vm.machineId === machine.machineId)
    .sort((a, b) => a.vmid - b.vmid)[0];
  if (hit === undefined) return null;
  const config = await readConfig(vmOf(ctx, hit), signal);
  return config === null ? null : { node: hit.node, vmid: hit.vmid, config };
}

/** vCPUs as the guest sees them (`vcpus` caps sockets × cores) and memory in MiB. */
function sizeOf(config: VmConfig): { vcpu: number; memoryMib: number } {
  const cores = Number(config.cores ?? 1);
  const sockets = Number(config.sockets ?? 1);
  const vcpu = config.vcpus !== undefined ? Number(config.vcpus) : cores * sockets;
  const memoryMib = Number(String(config.memory ?? "").replace(/^current=/, ""));
  return { vcpu, memoryMib };
}
