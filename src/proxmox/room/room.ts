// What the backend knows of each node's room, and its only owner: the last
// listing of the cluster (nodes and guests, fed by the describe pass and by
// every Create's adoption search), the reservations of accepted Creates, and
// which stopped VMs of others start on their own. What each guest counts for
// (docs/design.md#node-capacity):
//
// - every VM of ours whatever its state (Configure and Drain start it),
// - every other VM that is not stopped, and a stopped one HA keeps `started`
//   or whose config says `onboot: 1` (read once per describe pass:
//   ../cluster/room_read.ts),
// - never a template;
//
// each at its configured memory (`maxmem`: a guest may grow to it) and vCPUs
// (`maxcpu`). A Create holds a reservation of its type's size on its node
// from its admission until a listing made `settleMs` after it ended (when
// pvestatd shows its VM as sized) or, when it made no VM, until it ends; a
// listed VM of a reservation counts once, at the larger of the two.

import type { InstanceType } from "../../config/types.ts";
import type { ZoneRoom } from "../../kit/backend.ts";
import type { RoomPolicy } from "../../config/room.ts";
import type { BackendMemory } from "../memory.ts";
import { countListing, isOurs, type ListedGuest, type Listing, type NodeState } from "./counted.ts";
import {
  capacityOf,
  conditionRefusal,
  fitRefusal,
  type Held,
  type Need,
  type NodeCondition,
  type NodeRoom,
  slotsThatFit,
} from "./ledger.ts";

export type { ListedGuest, ListedNode, Listing } from "./counted.ts";

/** One accepted Create's hold on its node. */
interface Reservation {
  node: string;
  need: Need;
  vmid: number | null;
  /** Date.now() when its Create ended; null while it runs. */
  endedAt: number | null;
}

export interface RoomOptions {
  policy: RoomPolicy;
  catalog: ReadonlyMap<string, InstanceType>;
  /** Instance types offered per zone (what the report counts). */
  offered: ReadonlyMap<string, readonly string[]>;
  memory: BackendMemory;
  /** How long after a Create ended pvestatd is trusted to show its VM as sized. */
  settleMs: number;
  /** A refusal refreshes the listing in the background when it is older than this. */
  refreshMs: number;
  now?: () => number;
}

export interface Room {
  /** A listing read at `requestedAt`; one older than the newest seen is ignored. */
  observe(listing: Listing): void;
  /** Admission of a Create: null and a reservation held, or why its zone cannot take it now. */
  admit(machineId: string, type: InstanceType, zone: string): string | null;
  /** A Create runs: held from here if admission did not already hold it. */
  hold(machineId: string, type: InstanceType, zone: string): void;
  /** Before a clone, on the fresh listing: why it must not be made, or null. */
  recheck(machineId: string, type: InstanceType, zone: string): string | null;
  /** The Create's VM is `vmid`. */
  vmMade(machineId: string, vmid: number): void;
  /** The Create ended (made its VM or not). */
  createEnded(machineId: string): void;
  /** `vmid` was destroyed: it holds nothing from now on. */
  vmGone(vmid: number): void;
  /** Stopped VMs of others on the zones' nodes: their `onboot` decides whether they count. */
  stoppedOthers(): ListedGuest[];
  /** What `onboot` says for these VMs (read from their configs). */
  onbootRead(values: ReadonlyMap<number, boolean>): void;
  /** Why `type` can never fit the zone's node, from the figures alone; null when it can or unknown. */
  neverFits(type: InstanceType, zone: string): string | null;
  report(): ZoneRoom[];
  /** Runs in the background after a refusal (at most one at a time). */
  setRefresher(refresh: () => Promise<void>): void;
}

export function createRoom(opts: RoomOptions): Room {
  const { policy, memory, settleMs } = opts;
  const now = opts.now ?? Date.now;
  const reservations = new Map<string, Reservation>();
  /** vmid → machine id of the reservations whose VM is known. */
  const reservedVm = new Map<number, string>();
  let nodes: ReadonlyMap<string, NodeState> | null = null;
  let last: Listing | null = null;
  const onboot = new Map<number, boolean>();
  /** Per node: what the listing's guests hold, and the reservations on top. */
  let counted = new Map<string, Held>();
  /** Per machine with a reservation: what its listed VM holds. */
  let listedOf = new Map<string, Held>();
  /** vmid → when this process destroyed it: not counted until a later listing says otherwise. */
  const gone = new Map<number, number>();
  let refresher: (() => Promise<void>) | null = null;
  let refreshing = false;

  const ours = (vmid: number) =>
    memory.knownAs(vmid) !== undefined || memory.cloningFor(vmid) !== undefined;

  function recount(): void {
    if (last === null) return;
    const res = countListing(last.guests, {
      reservationOf: (vmid) => {
        const id = memory.cloningFor(vmid) ?? memory.knownAs(vmid) ?? reservedVm.get(vmid);
        return id !== undefined && reservations.has(id) ? id : undefined;
      },
      ours,
      onboot: (vmid) => onboot.get(vmid) === true,
      gone: (vmid) => gone.has(vmid),
    });
    counted = res.perNode;
    listedOf = res.perReservation;
  }

  /** What reservations add on `node` beyond their listed VMs, leaving out `except`'s. */
  function reservedOn(node: string, except?: string): Held {
    const out = { memoryMib: 0, vcpus: 0 };
    for (const [id, r] of reservations) {
      if (r.node !== node || id === except) continue;
      const listed = listedOf.get(id) ?? { memoryMib: 0, vcpus: 0 };
      out.memoryMib += Math.max(0, r.need.memoryMib - listed.memoryMib);
      out.vcpus += Math.max(0, r.need.vcpu - listed.vcpus);
    }
    return out;
  }

  function conditionOf(state: NodeState | undefined): NodeCondition {
    if (state === undefined) return { kind: "unknown" };
    if (state.status === "offline") return { kind: "offline" };
    if (state.status !== "online") return { kind: "unknown" };
    return state.figures === null ? { kind: "hidden" } : null;
  }

  function roomOf(node: string, except?: string): NodeRoom {
    const state = nodes?.get(node);
    const figures = state?.figures ?? null;
    const p = policy.get(node)!;
    const guests = counted.get(node) ?? { memoryMib: 0, vcpus: 0 };
    const extra = reservedOn(node, except);
    return {
      node,
      condition: conditionOf(state),
      figures,
      policy: p,
      capacity: figures === null ? { memoryMib: 0, vcpus: 0 } : capacityOf(figures, p),
      held: { memoryMib: guests.memoryMib + extra.memoryMib, vcpus: guests.vcpus + extra.vcpus },
    };
  }

  function refreshSoon(): void {
    if (refresher === null || refreshing) return;
    if (last !== null && now() - last.requestedAt < opts.refreshMs) return;
    refreshing = true;
    refresher().catch(() => {}).finally(() => refreshing = false);
  }

  function holdOn(machineId: string, type: InstanceType, zone: string): void {
    const r = reservations.get(machineId);
    if (r !== undefined && r.endedAt === null && r.node === zone) return;
    reservations.set(machineId, { node: zone, need: needOf(type), vmid: null, endedAt: null });
  }

  function drop(machineId: string): void {
    const r = reservations.get(machineId);
    if (r === undefined) return;
    reservations.delete(machineId);
    if (r.vmid !== null && reservedVm.get(r.vmid) === machineId) reservedVm.delete(r.vmid);
    listedOf.delete(machineId);
  }

  return {
    observe(listing) {
      if (last !== null && listing.requestedAt < last.requestedAt) return;
      if (listing.nodes !== null) nodes = listing.nodes;
      for (const [id, r] of reservations) {
        if (r.endedAt !== null && listing.requestedAt >= r.endedAt + settleMs) drop(id);
      }
      if (onboot.size > 0) {
        const listed = new Set(listing.guests.map((g) => g.vmid));
        for (const vmid of onboot.keys()) if (!listed.has(vmid)) onboot.delete(vmid);
      }
      // A listing asked for after a destroy is the record again (the VMID may be reused).
      for (const [vmid, at] of gone) if (at <= listing.requestedAt) gone.delete(vmid);
      last = listing;
      recount();
    },
    admit(machineId, type, zone) {
      const held = reservations.get(machineId);
      if (held !== undefined && held.endedAt === null) return null;
      // Never listed yet: the check before the clone decides, on a fresh listing.
      if (nodes !== null) {
        const refusal = fitRefusal(roomOf(zone, machineId), needOf(type));
        if (refusal !== null) {
          refreshSoon();
          return `zone ${zone}: ${refusal}`;
        }
      }
      holdOn(machineId, type, zone);
      return null;
    },
    hold: holdOn,
    recheck(machineId, type, zone) {
      if (nodes === null) return `zone ${zone}: ${conditionRefusal(zone, { kind: "unread" })}`;
      const refusal = fitRefusal(roomOf(zone, machineId), needOf(type));
      return refusal === null ? null : `zone ${zone}: ${refusal}`;
    },
    vmMade(machineId, vmid) {
      const r = reservations.get(machineId);
      if (r === undefined) return;
      r.vmid = vmid;
      reservedVm.set(vmid, machineId);
    },
    createEnded(machineId) {
      const r = reservations.get(machineId);
      if (r === undefined || r.endedAt !== null) return;
      if (r.vmid === null && memory.clonesOf(machineId).length === 0) drop(machineId);
      else r.endedAt = now();
    },
    vmGone(vmid) {
      gone.set(vmid, now());
      const id = reservedVm.get(vmid);
      if (id !== undefined && reservations.get(id)?.endedAt !== null) drop(id);
      recount();
    },
    stoppedOthers() {
      if (last === null) return [];
      return last.guests.filter((g) =>
        g.template !== 1 && g.status === "stopped" && g.hastate !== "started" &&
        policy.has(g.node) && nodes?.get(g.node)?.status === "online" && !isOurs(g, { ours })
      );
    },
    onbootRead(values) {
      for (const [vmid, on] of values) onboot.set(vmid, on);
      recount();
    },
    neverFits(type, zone) {
      const room = roomOf(zone);
      if (room.figures === null) return null;
      return fitRefusalIgnoringUse(room, needOf(type));
    },
    report() {
      return [...opts.offered].map(([zone, types]) => reportOf(roomOf(zone), types, opts.catalog));
    },
    setRefresher(refresh) {
      refresher = refresh;
    },
  };
}

/** One zone's line of the room report: its room now and how many of each type fit. */
function reportOf(
  room: NodeRoom,
  types: readonly string[],
  catalog: ReadonlyMap<string, InstanceType>,
): ZoneRoom {
  const fits: Record<string, number> = {};
  for (const name of types) {
    const t = catalog.get(name);
    if (t !== undefined) fits[name] = slotsThatFit(room, needOf(t));
  }
  const known = room.condition === null;
  const cap = room.capacity;
  return {
    zone: room.node,
    problem: conditionRefusal(room.node, room.condition) ?? "",
    memoryMib: {
      capacity: cap.memoryMib,
      held: room.held.memoryMib,
      free: known ? Math.max(0, cap.memoryMib - room.held.memoryMib) : 0,
    },
    vcpus: {
      capacity: cap.vcpus === Infinity ? null : cap.vcpus,
      held: room.held.vcpus,
      free: !known ? 0 : cap.vcpus === Infinity ? null : Math.max(0, cap.vcpus - room.held.vcpus),
    },
    fits,
  };
}

/** What a type asks of a node. */
function needOf(t: InstanceType): Need {
  return { name: t.name, vcpu: t.vcpu, memoryMib: t.memoryMib };
}

/** Whether the type could fit the node were it empty (the startup check). */
function fitRefusalIgnoringUse(room: NodeRoom, need: Need): string | null {
  return fitRefusal({ ...room, condition: null, held: { memoryMib: 0, vcpus: 0 } }, need);
}
