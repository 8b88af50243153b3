// What a storage holds: `SimStorage.usedBytes` (everything besides the
// guests' volumes) plus the provisioned size (`size=`) of every volume a
// guest config references there, on that node for a local storage. A linked
// clone's volume shares its base: it counts only what it grew beyond the
// base's size. A thin storage on a real node reports less (it allocates on
// write); counting the provisioned size is the conservative reading, and it
// makes a resize or a clone show in `used` at once.

import { driveBytes } from "./capacity.ts";
import type { SimCore } from "./router.ts";
import type { ClusterState, VmRecord } from "./state.ts";
import { isCloudinit, type StorageRecord, volumesOf } from "./storage.ts";

/** Linked-clone volumes → the size of the base they were cloned from. */
const linkedBases = new WeakMap<ClusterState, Map<string, number>>();

function bases(state: ClusterState): Map<string, number> {
  let m = linkedBases.get(state);
  if (!m) linkedBases.set(state, m = new Map());
  return m;
}

/** A clone made `volid`: linked from a base of `baseBytes`, or (undefined) a full copy. */
export function recordVolume(state: ClusterState, volid: string, baseBytes?: number): void {
  if (baseBytes === undefined) bases(state).delete(volid);
  else bases(state).set(volid, baseBytes);
}

const key = (storage: string, node: string | null) =>
  node === null ? storage : `${storage}@${node}`;

/** One pass over every guest: bytes its volumes take per storage (per node for local ones). */
export function storageUse(core: SimCore): (s: StorageRecord, node: string) => number {
  const linked = bases(core.state);
  const held = new Map<string, number>();
  const add = (vm: VmRecord) => {
    for (const v of volumesOf(vm.config)) {
      const s = v.storage === null ? undefined : core.state.storages.get(v.storage);
      if (!s || (v.cdrom && !isCloudinit(vm.config[v.key]))) continue;
      const bytes = Math.max(0, driveBytes(vm.config[v.key]) - (linked.get(v.volid) ?? 0));
      const k = key(s.id, s.shared ? null : vm.node);
      held.set(k, (held.get(k) ?? 0) + bytes);
    }
  };
  for (const vm of core.state.vms.values()) add(vm);
  return (s, node) => s.usedBytes + (held.get(key(s.id, s.shared ? null : node)) ?? 0);
}
