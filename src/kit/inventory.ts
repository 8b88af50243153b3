// Building the first inventory when the state store is empty: one SPECULATIVE
// machine per slot, except where the substrate already holds a VM made for
// that slot (an earlier life without --state), which comes back IDLE with its
// host. Tagged VMs with no slot are surfaced IDLE as orphans so they can be
// deleted.

import type { Slot } from "../config/types.ts";
import type { ManagedVm } from "./backend.ts";
import { ON_DEMAND, State } from "./model.ts";
import type { MachineRecord } from "./model.ts";

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
      templateVmid: 0,
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
