// Where the inventory comes from at boot. When the state store is empty: one SPECULATIVE
// machine per slot, except where the substrate already holds a VM made for
// that slot (an earlier life without --state), which comes back IDLE with its
// host. Tagged VMs with no slot are surfaced IDLE as orphans so they can be
// deleted.

import type { Slot } from "../config/types.ts";
import type { Backend, ManagedVm } from "./backend.ts";
import { ON_DEMAND, State, transitionalKind } from "./model.ts";
import type { MachineRecord } from "./model.ts";
import type { FenceEntry, StateStore } from "./store.ts";

const DESCRIBE_AT_BOOT_MS = 120_000;

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
    shardMetadata: [],
    lastError: "",
    ops: {},
    orphan: false,
  };
}

/** The id an orphan VM is listed under: its marker's machine id, else one derived from its host. */
export function orphanId(provider: string, vm: ManagedVm): string {
  return vm.machineId !== "" ? vm.machineId : `${provider}/orphan/${vm.hostRef}`;
}

export function orphanMachine(provider: string, vm: ManagedVm): MachineRecord {
  return {
    ...slotMachine({
      id: orphanId(provider, vm),
      instanceType: "pve.orphan",
      zone: vm.node,
      pricePerHour: 0,
      resources: [],
      allocatable: [],
      labels: [],
      vcpu: 0,
      memoryMib: 0,
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
  /** Machines as found: loaded from the store, or built for an empty one. */
  machines: MachineRecord[];
  /** Loaded machines whose transition the restart cut short, now FAILED. */
  interrupted: MachineRecord[];
  fences: FenceEntry[];
  /** The revision the fleet starts at. */
  rev: number;
  /** True when the state store already held a fleet. */
  restored: boolean;
}

/**
 * Where the fleet comes from at boot. A non-empty store is authoritative:
 * nothing is seeded, transitions cut short by the restart become FAILED, and
 * the revision moves one past the saved one so every pre-restart cursor
 * returns the full fleet. An empty store gets the slots (and any VMs the
 * substrate already holds), starting from the clock so cursors from an
 * earlier, forgotten life are older.
 */
export async function bootInventory(
  store: StateStore,
  backend: Backend,
  provider: string,
  slots: readonly Slot[],
): Promise<BootInventory> {
  const saved = await store.load();
  if (saved) {
    const interrupted: MachineRecord[] = [];
    for (const m of saved.machines) {
      const kind = transitionalKind(m.state);
      if (kind) {
        interrupted.push({
          ...m,
          state: State.Failed,
          lastError: `${kind} transition interrupted by a provider restart; needs re-drive`,
        });
      }
    }
    return {
      machines: saved.machines,
      interrupted,
      fences: saved.fences,
      rev: saved.rev + 1,
      restored: true,
    };
  }
  const vms = await backend.describe(AbortSignal.timeout(DESCRIBE_AT_BOOT_MS));
  return {
    machines: initialInventory(provider, slots, vms),
    interrupted: [],
    fences: [],
    rev: Date.now(),
    restored: false,
  };
}
