// The in-memory fake: a tiny Proxmox stand-in behind the same Backend seam,
// for the credential-free certification run and demos. Every transition takes
// `delayMs` (0 = next tick, so transitional states are still observable).
// It is lenient about VMs it has forgotten (a restart empties it while the
// state store remembers them): it simply takes them back.

import type { Backend, ManagedVm } from "../kit/backend.ts";
import { sleep } from "../kit/deadline.ts";

export interface FakeOptions {
  zones: readonly string[];
  delayMs: number;
  /** First VMID handed out; real clusters start user VMs at 100. */
  firstVmid?: number;
}

interface FakeVm {
  machineId: string;
  node: string;
  vmid: number;
  cluster: string;
  running: boolean;
}

export function createFakeBackend(opts: FakeOptions): Backend {
  const vms = new Map<string, FakeVm>();
  let nextVmid = opts.firstVmid ?? 100;

  function adopt(machineId: string, hostRef: string): FakeVm {
    let vm = vms.get(machineId);
    if (!vm) {
      const [node, vmid] = hostRef.split("/");
      vm = { machineId, node, vmid: Number(vmid), cluster: "", running: true };
      vms.set(machineId, vm);
    }
    return vm;
  }

  return {
    kind: "fake",
    zones: opts.zones,
    async create(slot, signal) {
      await sleep(opts.delayMs, signal);
      let vm = vms.get(slot.machineId);
      if (!vm) {
        vm = {
          machineId: slot.machineId,
          node: slot.zone,
          vmid: nextVmid++,
          cluster: "",
          running: true,
        };
        vms.set(slot.machineId, vm);
      }
      return { hostRef: `${vm.node}/${vm.vmid}` };
    },
    async configure(m, spec, signal) {
      await sleep(opts.delayMs, signal);
      adopt(m.machineId, m.hostRef).cluster = spec.clusterId;
    },
    async drain(m, _grace, signal) {
      await sleep(opts.delayMs, signal);
      adopt(m.machineId, m.hostRef).cluster = "";
    },
    async delete(m, signal) {
      await sleep(opts.delayMs, signal);
      vms.delete(m.machineId);
    },
    describe(): Promise<ManagedVm[]> {
      return Promise.resolve([...vms.values()].map((vm) => ({
        machineId: vm.machineId,
        hostRef: `${vm.node}/${vm.vmid}`,
        node: vm.node,
        vmid: vm.vmid,
        status: vm.running ? "running" : "stopped",
        cloning: false,
      })));
    },
    close: () => Promise.resolve(),
  };
}
