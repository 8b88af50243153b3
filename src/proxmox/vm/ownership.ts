// Is this VM still ours, and where is it now? A host ref names the node a VM
// was made on, but VMs migrate and VMIDs get reused: every touch of an
// existing VM goes through here first.

import { getLogger } from "@logtape/logtape";
import { BackendError, type HostedMachine } from "../../kit/backend.ts";
import {
  isPermissionError,
  listResources,
  type Located,
  readConfig,
  type VmConfig,
  vmOf,
  waitUnlocked,
} from "./vm.ts";
import type { ApiClient } from "../api/client.ts";
import type { ProxmoxContext } from "../context.ts";
import { machineTag, parseHostRef, parseMarker, parseTags } from "../naming.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** The node and VMID a machine's host ref names. */
export function requireHostRef(machine: HostedMachine): { node: string; vmid: number } {
  const ref = parseHostRef(machine.hostRef);
  if (ref === null) {
    throw new BackendError(`malformed host ref ${JSON.stringify(machine.hostRef)}`);
  }
  return ref;
}

/** The node a VMID lives on now, or null if no readable node has it. */
export async function relocate(
  ctx: ProxmoxContext,
  vmid: number,
  skip: string,
  signal: AbortSignal,
): Promise<string | null> {
  const { api, nodes } = ctx;
  try {
    const hit = (await listResources(api, signal)).find((e) => e.vmid === vmid);
    if (hit) return hit.node;
  } catch (err) {
    if (!isPermissionError(err)) throw err;
  }
  // The listing hides VMs without VM.Audit: ask the candidate nodes directly.
  return await nodeHolding(api, vmid, nodes.filter((n) => n !== skip), signal);
}

/**
 * The first of `nodes` whose config of `vmid` reads, or null. A node that
 * cannot answer (down, no rights there) does not stop the search.
 */
export async function nodeHolding(
  api: ApiClient,
  vmid: number,
  nodes: Iterable<string>,
  signal: AbortSignal,
): Promise<string | null> {
  for (const node of nodes) {
    try {
      if ((await readConfig({ api, node, vmid }, signal)) !== null) return node;
    } catch (err) {
      if (signal.aborted) throw err;
      log.debug("could not look for VM {vmid} on {node}: {error}", {
        vmid,
        node,
        error: (err as Error).message,
      });
    }
  }
  return null;
}

/**
 * For a VM that `from` no longer has: the node it moved to and its config
 * there (once unlocked), or `from` and null when no node has it.
 */
export async function followMove(
  ctx: ProxmoxContext,
  vmid: number,
  from: string,
  signal: AbortSignal,
): Promise<{ node: string; config: VmConfig | null }> {
  const moved = await relocate(ctx, vmid, from, signal);
  if (moved === null) return { node: from, config: null };
  return {
    node: moved,
    config: await waitUnlocked(vmOf(ctx, { node: moved, vmid }), ctx.timing, signal),
  };
}

export function ownedBy(config: VmConfig, machineId: string): "ours" | "foreign" {
  const marker = parseMarker(config.description);
  if (marker !== null) return marker.machineId === machineId ? "ours" : "foreign";
  return parseTags(config.tags).includes(machineTag(machineId)) ? "ours" : "foreign";
}

/** The VM behind a host ref, if it is still the one made for this machine. */
export async function locateOwned(
  ctx: ProxmoxContext,
  machine: HostedMachine,
  signal: AbortSignal,
): Promise<Located> {
  const ref = requireHostRef(machine);
  let node = ref.node;
  let config = await waitUnlocked(vmOf(ctx, ref), ctx.timing, signal);
  if (config === null) ({ node, config } = await followMove(ctx, ref.vmid, node, signal));
  if (config === null) {
    throw new BackendError(`VM ${ref.vmid} of machine ${machine.machineId} no longer exists`);
  }
  if (ownedBy(config, machine.machineId) !== "ours") {
    // Never hand a bootstrap (a cluster join secret) to a VM someone else owns now.
    throw new BackendError(
      `VM ${ref.vmid} on ${node} is not the VM made for machine ${machine.machineId}; refusing to touch it`,
    );
  }
  return { node, vmid: ref.vmid, config };
}
