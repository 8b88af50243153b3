// What one listing of the cluster says each node holds: the shapes the room
// reads (a node of /nodes, a qemu guest of /cluster/resources) and the count
// itself, one pass over the guests (docs/design.md#node-capacity says which
// guests count and why).

import { MANAGED_TAG, parseTags } from "../naming.ts";
import type { ResourceEntry } from "../vm/vm.ts";
import { type Held, mibOf, type NodeFigures } from "./ledger.ts";

/** A node as GET /nodes lists it (figures only with Sys.Audit on /nodes/<node>). */
export interface ListedNode {
  node: string;
  status: string;
  /** Bytes. */
  maxmem?: number;
  maxcpu?: number;
}

/** A qemu guest as /cluster/resources lists it (figures once pvestatd reported it). */
export type ListedGuest = ResourceEntry;

/** What the room keeps of a node: its status and, when visible, its figures. */
export interface NodeState {
  status: string;
  figures: NodeFigures | null;
}

/** One listing, and when it was asked for (a later request sees more). */
export interface Listing {
  requestedAt: number;
  /** Null when /nodes could not be read: the previous node states stay. */
  nodes: ReadonlyMap<string, NodeState> | null;
  guests: readonly ListedGuest[];
}

/** The node states of a /nodes answer. */
export function nodeStatesOf(list: readonly ListedNode[]): Map<string, NodeState> {
  const out = new Map<string, NodeState>();
  for (const n of list) {
    const figures = typeof n.maxmem === "number" && typeof n.maxcpu === "number" && n.maxmem > 0
      ? { memoryMib: mibOf(n.maxmem), cpus: n.maxcpu }
      : null;
    out.set(n.node, { status: n.status, figures });
  }
  return out;
}

export interface CountHooks {
  /** The machine whose reservation `vmid` belongs to, if any. */
  reservationOf(vmid: number): string | undefined;
  /** Whether the backend knows `vmid` as one of its machines' VMs (or clones into it). */
  ours(vmid: number): boolean;
  /** Whether a stopped VM of someone else's config says `onboot: 1`. */
  onboot(vmid: number): boolean;
  /** Whether `vmid` was destroyed since the listing was asked for. */
  gone(vmid: number): boolean;
}

/** Per node what the guests hold; per reservation what its listed VM holds. */
export function countListing(guests: readonly ListedGuest[], hooks: CountHooks): {
  perNode: Map<string, Held>;
  perReservation: Map<string, Held>;
} {
  const perNode = new Map<string, Held>();
  const perReservation = new Map<string, Held>();
  for (const g of guests) {
    if (g.template === 1 || hooks.gone(g.vmid)) continue;
    const reservation = hooks.reservationOf(g.vmid);
    if (reservation === undefined && !counts(g, hooks)) continue;
    const memoryMib = mibOf(g.maxmem ?? 0);
    const vcpus = g.maxcpu ?? 0;
    if (reservation !== undefined) perReservation.set(reservation, { memoryMib, vcpus });
    let sum = perNode.get(g.node);
    if (sum === undefined) perNode.set(g.node, sum = { memoryMib: 0, vcpus: 0 });
    sum.memoryMib += memoryMib;
    sum.vcpus += vcpus;
  }
  return { perNode, perReservation };
}

/** Ours whatever its state; anyone's unless stopped for good. */
function counts(g: ListedGuest, hooks: CountHooks): boolean {
  if (isOurs(g, hooks)) return true;
  if (g.status !== "stopped") return true;
  return g.hastate === "started" || hooks.onboot(g.vmid);
}

/** Known to the backend, named like its clones, or tagged by an earlier version. */
export function isOurs(g: ListedGuest, hooks: Pick<CountHooks, "ours">): boolean {
  return hooks.ours(g.vmid) || (g.name ?? "").startsWith("bigfleet-") ||
    parseTags(g.tags).includes(MANAGED_TAG);
}
