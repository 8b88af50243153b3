// Slots as machine records: the SPECULATIVE record of a slot, and applying a
// changed set of slots (offerings, catalog, pricing) to a fleet restored from
// the state store. The rules keep every machine BigFleet may
// be using: a slot that is new appears SPECULATIVE; a slot that is gone
// leaves at once only while SPECULATIVE, otherwise it is marked to leave the
// inventory when its Delete completes; a record whose instance type or zone
// no longer matches its slot is left untouched and reported. Descriptive
// fields (price, resources, allocatable, labels) follow the slot only while
// the machine is SPECULATIVE: a machine with a host keeps what it was made as.
//
// The result is applied by the kit in one synchronous step, so the state
// store commits it as one logical write (docs/design.md#capacity-changes-and-boot).

import { NO_OPS, NO_PAIRS, ON_DEMAND, State } from "./model.ts";
import type { MachineRecord, Pairs, Slot } from "./model.ts";

export interface CapacityChange {
  /** Records to write: new slots, retired machines, refreshed SPECULATIVE ones. */
  put: MachineRecord[];
  /** Ids to drop now: SPECULATIVE machines whose slot is gone. */
  remove: string[];
  /** New slots. */
  added: number;
  /** Slots gone from the offerings (removed now or marked to leave once deleted). */
  retired: number;
  /** Machines without a slot that stay until they are deleted (retired ones and orphans). */
  pending: number;
  /** Machines whose slot now names another instance type or zone: left as they are. */
  mismatched: { id: string; was: string; now: string }[];
  /** SPECULATIVE machines whose price, resources, allocatable or labels changed. */
  refreshed: number;
}

export function slotMachine(slot: Slot): MachineRecord {
  return {
    id: slot.id,
    state: State.Speculative,
    hostRef: "",
    instanceType: slot.instanceType,
    zone: slot.zone,
    capacityType: ON_DEMAND,
    pricePerHour: slot.pricePerHour,
    interruptionProbability: 0,
    resources: slot.resources,
    allocatable: slot.allocatable,
    labels: slot.labels,
    cluster: "",
    shardMetadata: NO_PAIRS,
    lastError: "",
    ops: NO_OPS,
    orphan: false,
  };
}

/** Human summary for the startup line: `+N slots, -M retired, K pending`. */
export function describeChange(c: CapacityChange): string {
  return `+${c.added} slots, -${c.retired} retired, ${c.pending} pending`;
}

export function planCapacityChange(
  saved: readonly MachineRecord[],
  slots: readonly Slot[],
): CapacityChange {
  const change: CapacityChange = {
    put: [],
    remove: [],
    added: 0,
    retired: 0,
    pending: 0,
    mismatched: [],
    refreshed: 0,
  };
  // A restored fleet lists its slots first, in slot order, unless the offerings
  // changed: that common prefix needs no lookups.
  let i = 0;
  for (; i < saved.length && i < slots.length && saved[i].id === slots[i].id; i++) {
    planMachine(change, saved[i], slots[i]);
  }
  const bySlot = new Map<string, Slot>();
  for (const slot of slots.slice(i)) bySlot.set(slot.id, slot);
  const seen = new Set<string>();
  for (const m of saved.slice(i)) {
    seen.add(m.id);
    planMachine(change, m, bySlot.get(m.id));
  }
  for (const slot of slots.slice(i)) {
    if (seen.has(slot.id)) continue;
    change.put.push(slotMachine(slot));
    change.added++;
  }
  return change;
}

/** What the change does to one restored machine, given its slot if it still has one. */
function planMachine(change: CapacityChange, m: MachineRecord, slot: Slot | undefined): void {
  if (!slot) {
    if (m.orphan) {
      change.pending++;
    } else if (m.state === State.Speculative) {
      change.remove.push(m.id);
      change.retired++;
    } else {
      change.put.push({ ...m, orphan: true });
      change.retired++;
      change.pending++;
    }
    return;
  }
  if (m.instanceType !== slot.instanceType || m.zone !== slot.zone) {
    change.mismatched.push({
      id: m.id,
      was: `${m.instanceType}@${m.zone}`,
      now: `${slot.instanceType}@${slot.zone}`,
    });
    if (m.orphan) change.pending++;
    return;
  }
  if (m.state === State.Speculative) {
    // A SPECULATIVE record of this id without a slot is back in the offerings: a slot again.
    // Compared on the slot itself: a restart of a large fleet builds no record per machine.
    if (m.orphan || !sameDescription(m, slot)) {
      const { pricePerHour, resources, allocatable, labels } = slot;
      change.put.push({ ...m, pricePerHour, resources, allocatable, labels, orphan: false });
      if (!m.orphan) change.refreshed++;
    }
  } else if (m.orphan) {
    // Back in the offerings while it still has a host: it stays, as a slot.
    change.put.push({ ...m, orphan: false });
  }
}

/** The descriptive fields a slot gives its record (see slotMachine). */
type Description = Pick<MachineRecord, "pricePerHour" | "resources" | "allocatable" | "labels">;

function sameDescription(a: Description, b: Description): boolean {
  return a.pricePerHour === b.pricePerHour && samePairs(a.resources, b.resources) &&
    samePairs(a.allocatable, b.allocatable) && samePairs(a.labels, b.labels);
}

function samePairs(a: Pairs, b: Pairs): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i][0] !== b[i][0] || a[i][1] !== b[i][1]) return false;
  }
  return true;
}
