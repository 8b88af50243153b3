// Where the inventory comes from at boot. When the state store is empty: one SPECULATIVE
// machine per slot, except where the substrate already holds a host made for
// that slot (an earlier life without --state), which comes back IDLE with its
// host. Managed hosts with no slot are surfaced IDLE as orphans so they can be
// deleted. When the store holds a fleet, it is the inventory, adjusted to the
// current slots (capacity.ts). The rules: docs/design.md#capacity-changes-and-boot.

import type { Backend, ManagedVm } from "./backend.ts";
import { State, transitionalKind } from "./model.ts";
import type { MachineRecord, Slot } from "./model.ts";
import type { FenceEntry, StateStore } from "./store.ts";
import { planCapacityChange, slotMachine } from "./capacity.ts";
import type { CapacityChange } from "./capacity.ts";

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
 * a changed set of slots is applied by the rules in capacity.ts, and the
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

/** What one reconcile pass does to the fleet, decided from what the backend described. */
export interface ReconcilePlan {
  /** Records to write, in order. */
  put: MachineRecord[];
  /** IDLE or CONFIGURED machines whose VM moved. */
  followed: number;
  /** Managed VMs no machine claims, now orphans. */
  orphans: number;
  /** FAILED machines whose VM was found (or found elsewhere): its host is shown on them. */
  failedHosts: { id: string; hostRef: string; cloning: boolean }[];
  /** SPECULATIVE machines whose VM exists (a state older than the cluster): IDLE on it. */
  rejoined: { id: string; hostRef: string }[];
}

/**
 * The reconcile rules (docs/design.md#capacity-changes-and-boot): only host
 * refs move, and a record changes only when the substrate says something new.
 * `get` reads the fleet as it is now; `changedDuring` says whether a machine
 * changed while the backend was describing (its listing may predate that
 * change: a Delete that destroyed the VM meanwhile must not bring it back).
 */
export function planReconcile(
  provider: string,
  vms: readonly ManagedVm[],
  get: (id: string) => MachineRecord | undefined,
  changedDuring: (id: string) => boolean,
): ReconcilePlan {
  const plan: ReconcilePlan = { put: [], followed: 0, orphans: 0, failedHosts: [], rejoined: [] };
  const byId = new Map<string, ManagedVm[]>();
  for (const vm of vms) {
    const id = orphanId(provider, vm);
    const list = byId.get(id);
    if (list) list.push(vm);
    else byId.set(id, [vm]);
  }
  for (const [id, hosts] of byId) {
    const m = get(id);
    // A host still being created may be a retried Create's of ours: never judged by it.
    const settled = hosts.find((vm) => !vm.cloning);
    if (!m) {
      if (settled) {
        plan.put.push(orphanMachine(provider, settled));
        plan.orphans++;
      }
      continue;
    }
    // Several VMs may carry one machine's marker: keep the one recorded if it is among them.
    if (m.hostRef !== "" && hosts.some((vm) => vm.hostRef === m.hostRef)) continue;
    switch (m.state) {
      case State.Idle:
      case State.Configured:
        // Follow a host that moved (its backend names it anew); nothing else is touched.
        if (m.hostRef !== "" && settled) {
          plan.put.push({ ...m, hostRef: settled.hostRef });
          plan.followed++;
        }
        break;
      case State.Failed: {
        // Shown, never touched: the operator decides (machines recover). A FAILED
        // Create's clone may still be in flight; that is its host all the same.
        const vm = settled ?? (m.hostRef === "" ? hosts[0] : undefined);
        if (vm) {
          plan.put.push({ ...m, hostRef: vm.hostRef });
          plan.failedHosts.push({ id, hostRef: vm.hostRef, cloning: vm.cloning });
        }
        break;
      }
      case State.Speculative:
        // Only a state restored from an older copy has a slot with no record of its VM.
        if (settled && !changedDuring(id)) {
          plan.put.push({ ...m, state: State.Idle, hostRef: settled.hostRef });
          plan.rejoined.push({ id, hostRef: settled.hostRef });
        }
        break;
    }
  }
  return plan;
}
