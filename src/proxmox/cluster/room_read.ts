// The reads that feed the room (../room/room.ts): a listing of nodes and
// guests (the describe pass and Create's adoption search make theirs anyway
// and hand them over; a refused admission asks for one of its own, at most
// one per --room refresh interval), and the `onboot` of stopped VMs of others,
// read once per describe pass and kept until the VM leaves the listing.

import { getLogger } from "@logtape/logtape";
import { mapLimit } from "../../async/limit.ts";
import type { ProxmoxContext } from "../context.ts";
import type { ListedNode, Listing } from "../room/counted.ts";
import { nodeStatesOf } from "../room/counted.ts";
import { listResources, readConfig, type ResourceEntry, vmOf } from "../vm/vm.ts";
import { nodeList } from "./nodes.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** Reads of stopped VMs' configs in flight at once (each a pveproxy read, no pvedaemon worker). */
const ONBOOT_READS = 4;

/** A listing as the room takes it: guests of a successful /cluster/resources read, nodes maybe. */
export function listingOf(
  requestedAt: number,
  guests: readonly ResourceEntry[],
  nodes: readonly ListedNode[] | null,
): Listing {
  return { requestedAt, guests, nodes: nodes === null ? null : nodeStatesOf(nodes) };
}

/** Read the guests and nodes now and hand them to the room (the two calls a listing takes). */
export async function refreshRoom(ctx: ProxmoxContext, signal: AbortSignal): Promise<void> {
  const requestedAt = Date.now();
  const [guests, nodes] = await Promise.all([
    listResources(ctx.api, signal),
    nodeList(ctx.api, signal),
  ]);
  ctx.room.observe(listingOf(requestedAt, guests, nodes));
}

/** The room's refresher: a background listing bounded by the client's own request timeout. */
export function roomRefresher(ctx: ProxmoxContext): () => Promise<void> {
  return async () => {
    try {
      await refreshRoom(ctx, AbortSignal.timeout(ctx.timing.requestTimeoutMs));
    } catch (err) {
      log.debug("could not refresh the nodes' room: {error}", { error: (err as Error).message });
    }
  };
}

/**
 * Read `onboot` of the stopped VMs of others on the zones' nodes (each pass
 * again: an operator may change it); a config that cannot be read keeps what
 * was read before, or counts as not starting on its own.
 */
export async function readOnboot(ctx: ProxmoxContext, signal: AbortSignal): Promise<void> {
  const stopped = ctx.room.stoppedOthers();
  if (stopped.length === 0) return;
  const values = new Map<number, boolean>();
  await mapLimit(stopped, ONBOOT_READS, async (g) => {
    try {
      const config = await readConfig(vmOf(ctx, g), signal, { attempts: 1 });
      if (config !== null) values.set(g.vmid, Number(config.onboot ?? 0) === 1);
    } catch (err) {
      if (signal.aborted) throw err;
    }
  });
  ctx.room.onbootRead(values);
}
