// Where the inventory comes from at boot. When the state store is empty: one SPECULATIVE
// machine per slot, except where the substrate already holds a host made for
// that slot (an earlier life without --state), which comes back IDLE with its
// host. Managed hosts with no slot are surfaced IDLE as orphans so they can be
// deleted. When the store holds a fleet, it is the inventory, adjusted to the
// current slots (slot_changes.ts). The rules: docs/design.md#capacity-changes-and-boot.

import type { Backend, ManagedVm } from "./backend.ts";
import { State, transitionalKind } from "./model.ts";
import type { MachineRecord, Slot } from "./model.ts";
import type { FenceEntry, StateStore } from "./store.ts";
import { planCapacityChange, slotMachine } from "./slot_changes.ts";
import type { CapacityChange } from "./slot_changes.ts";

const DESCRIBE_AT_BOOT_MS = 120_000;

/** The id an orphan is listed under: the machine id its host carries, else one derived from its host ref. */
export function orphanId(provider: string, vm: ManagedVm): string {
  return vm.machineId !== "" ? vm.machineId : `${provider}/orphan/${vm.hostRef}`;
}

export function orphanMachine(provider: string, vm: ManagedVm): MachineRecord {
  return {
    ...slotMachine({
      id: orphanId(provider, vm),
      instanceType: vm.instanceType,
      zone: vm.zone,
      pricePerHour: 0,
      resources: [],
      allocatable: [],
      labels: [],
    }),
    state: State.Idle,
    hostRef: vm.hostRef,
    orphan: true,
  };
}

export function initialInventory(
  provider: string,
  slots: readonly Slot[],
  vms: readonly ManagedVm[],
): MachineRecord[] {
  const found = new Map<string, ManagedVm>();
  for (const vm of vms) {
    if (!found.has(orphanId(provider, vm))) found.set(orphanId(provider, vm), vm);
  }
  const machines = slots.map((slot) => {
    const vm = found.get(slot.id);
    found.delete(slot.id);
    return vm
      ? { ...slotMachine(slot), state: State.Idle, hostRef: vm.hostRef }
      : slotMachine(slot);
  });
  for (const vm of found.values()) machines.push(orphanMachine(provider, vm));
  return machines;
}

export interface BootInventory {
  /** The fleet to start from: loaded from the store, or built for an empty one. */
  machines: MachineRecord[];
  /** Records to write on top (interrupted transitions, capacity changes); empty for a new fleet. */
  updates: MachineRecord[];
  /** Ids among `machines` to drop (SPECULATIVE machines whose slot is gone). */
  removed: string[];
  /** Loaded machines whose transition the restart cut short, now FAILED. */
  interrupted: number;
  /** What a changed set of slots did to a restored fleet; null for a new fleet. */
  capacity: CapacityChange | null;
  fences: FenceEntry[];
  /** The revision the fleet starts at. */
  rev: number;
  /** True when the state store already held a fleet. */
  restored: boolean;
}

/**
 * Where the fleet comes from at boot. A non-empty store is authoritative:
 * nothing is re-seeded, transitions cut short by the restart become FAILED,
 * a changed set of slots is applied by the rules in slot_changes.ts, and the
 * revision moves past the saved one (and the clock) so every pre-restart
 * cursor returns the full fleet. An empty store gets the slots (and any hosts the substrate
 * already holds), starting from the clock so cursors from an earlier,
 * forgotten life are older.
 */
export async function bootInventory(
  store: StateStore,
  backend: Backend,
  provider: string,
  slots: readonly Slot[],
): Promise<BootInventory> {
  const saved = await store.load();
  if (saved) {
    const updates = new Map<string, MachineRecord>();
    const current = saved.machines.map((m) => {
      const kind = transitionalKind(m.state);
      if (!kind) return m;
      const failed = {
        ...m,
        state: State.Failed,
        lastError: `${kind} transition interrupted by a provider restart; needs re-drive`,
      };
      updates.set(m.id, failed);
      return failed;
    });
    const interrupted = updates.size;
    const capacity = planCapacityChange(current, slots);
    for (const m of capacity.put) updates.set(m.id, m);
    return {
      machines: saved.machines,
      updates: [...updates.values()],
      removed: capacity.remove,
      interrupted,
      capacity,
      fences: saved.fences,
      // Never below the clock, where a new fleet's revisions start: a state restored
      // from an older copy is behind the cursors its shards got since, which must
      // still read as older and return the whole fleet (docs/install.md#backup-and-restore).
      rev: Math.max(saved.rev, Date.now()) + 1,
      restored: true,
    };
  }
  const vms = await backend.describe(AbortSignal.timeout(DESCRIBE_AT_BOOT_MS));
  return {
    machines: initialInventory(provider, slots, vms),
    updates: [],
    removed: [],
    interrupted: 0,
    capacity: null,
    fences: [],
    rev: Date.now(),
    restored: false,
  };
}
