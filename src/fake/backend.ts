// The in-memory fake: the smallest Backend (src/kit/backend.ts), for the
// credential-free certification run and demos. Every transition takes
// `delayMs` (0 = next tick, so transitional states are still observable).
// It ignores sizing. It is lenient about hosts it has forgotten (a restart
// empties it while the state store remembers them): it simply takes them back.

import type { Backend, ManagedVm } from "../kit/backend.ts";
import { sleep } from "../async/sleep.ts";

export interface FakeOptions {
  delayMs: number;
}

/** What orphans are listed as: the Proxmox backend's name, so the fake stands in for it. */
const ORPHAN_TYPE = "pve.orphan";

interface FakeVm {
  hostRef: string;
  zone: string;
}

export function createFakeBackend(opts: FakeOptions): Backend {
  const vms = new Map<string, FakeVm>();
  let nextId = 100;

  function adopt(machineId: string, hostRef: string): void {
    // Its own host ref format: `<zone>/<n>`.
    if (!vms.has(machineId)) vms.set(machineId, { hostRef, zone: hostRef.split("/")[0] });
  }

  return {
    kind: "fake",
    async create(slot, signal) {
      await sleep(opts.delayMs, signal);
      let vm = vms.get(slot.machineId);
      if (!vm) {
        vm = { hostRef: `${slot.zone}/${nextId++}`, zone: slot.zone };
        vms.set(slot.machineId, vm);
      }
      return { hostRef: vm.hostRef };
    },
    async configure(m, _spec, signal) {
      await sleep(opts.delayMs, signal);
      adopt(m.machineId, m.hostRef);
    },
    async drain(m, _grace, signal) {
      await sleep(opts.delayMs, signal);
      adopt(m.machineId, m.hostRef);
    },
    async delete(m, signal) {
      await sleep(opts.delayMs, signal);
      vms.delete(m.machineId);
    },
    describe(): Promise<ManagedVm[]> {
      return Promise.resolve([...vms].map(([machineId, vm]) => ({
        machineId,
        hostRef: vm.hostRef,
        zone: vm.zone,
        instanceType: ORPHAN_TYPE,
        cloning: false,
      })));
    },
    inspect(m) {
      // Lenient as everywhere: a host on record that it forgot is taken back.
      if (m.hostRef !== "") adopt(m.machineId, m.hostRef);
      const vm = vms.get(m.machineId);
      if (!vm) return Promise.resolve(null);
      return Promise.resolve({
        hostRef: vm.hostRef,
        summary: `fake host ${vm.hostRef}`,
        problems: [],
      });
    },
    close: () => Promise.resolve(),
  };
}
