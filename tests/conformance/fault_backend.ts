// A Backend that injects faults on command through the wire, mirroring the Go
// faultprovider (catalog §3.2) so B701–B708 can run in-process against our kit:
//   Create fails for machine ids in `createFaults`;
//   Configure by cluster_id: fault-error (errors at once), fault-timeout
//   (blocks until aborted), fault-slow-ok (ignores the abort, succeeds at
//   timeout + 1 s), fault-readiness-block (the hook "succeeds" but readiness
//   never comes: our seam has no separate gate, so it blocks until aborted);
//   Drain fails for machines bound to fault-drain-error; Delete always works.

import type { Backend, ManagedVm } from "../../src/kit/backend.ts";
import { BackendError } from "../../src/kit/backend.ts";

export interface FaultBackendOptions {
  createFaults: ReadonlySet<string>;
  /** The provider's transition timeout; fault-slow-ok reports success 1 s after it. */
  transitionTimeoutMs: number;
}

/** Resolves when `signal` aborts, rejecting with its reason (a blocked actuator). */
function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

export interface FaultBackend extends Backend {
  /** Resolves once the fault-slow-ok actuator of `machineId` has reported its (late) success. */
  lateSuccess(machineId: string): Promise<void>;
}

export function createFaultBackend(o: FaultBackendOptions): FaultBackend {
  /** machine id → its host: `<zone>/<n>` (this backend's own host ref format). */
  const vms = new Map<string, { hostRef: string; zone: string; cluster: string }>();
  let nextHost = 100;
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const lateSuccesses = new Map<string, PromiseWithResolvers<void>>();
  const lateSuccess = (id: string) => {
    let p = lateSuccesses.get(id);
    if (!p) lateSuccesses.set(id, p = Promise.withResolvers<void>());
    return p;
  };

  function hosted(machineId: string, hostRef: string) {
    let vm = vms.get(machineId);
    if (!vm) {
      vm = { hostRef, zone: hostRef.split("/")[0], cluster: "" };
      vms.set(machineId, vm);
    }
    return vm;
  }

  return {
    kind: "fault",
    lateSuccess: (id) => lateSuccess(id).promise,
    create(slot) {
      if (o.createFaults.has(slot.machineId)) {
        return Promise.reject(
          new BackendError("injected create fault (conformance.fault/create=error)"),
        );
      }
      const vm = { hostRef: `${slot.zone}/${nextHost++}`, zone: slot.zone, cluster: "" };
      vms.set(slot.machineId, vm);
      return Promise.resolve({ hostRef: vm.hostRef });
    },
    async configure(m, spec, signal) {
      const vm = hosted(m.machineId, m.hostRef);
      vm.cluster = spec.clusterId;
      switch (spec.clusterId) {
        case "fault-error":
          throw new BackendError("injected configure fault (fault-error)");
        case "fault-timeout":
        case "fault-readiness-block":
          await untilAborted(signal);
          return;
        case "fault-slow-ok":
          await new Promise<void>((r) => {
            const t = setTimeout(() => {
              timers.delete(t);
              r();
            }, o.transitionTimeoutMs + 1000);
            timers.add(t);
          });
          lateSuccess(m.machineId).resolve();
          return;
      }
    },
    drain(m) {
      const vm = hosted(m.machineId, m.hostRef);
      if (vm.cluster === "fault-drain-error") {
        return Promise.reject(new BackendError("injected drain fault (fault-drain-error)"));
      }
      vm.cluster = "";
      return Promise.resolve();
    },
    delete(m) {
      vms.delete(m.machineId);
      return Promise.resolve();
    },
    describe(): Promise<ManagedVm[]> {
      return Promise.resolve([...vms].map(([machineId, vm]) => ({
        machineId,
        hostRef: vm.hostRef,
        zone: vm.zone,
        instanceType: "fault.orphan",
        cloning: false,
      })));
    },
    inspect(m) {
      const vm = vms.get(m.machineId);
      return Promise.resolve(
        vm ? { hostRef: vm.hostRef, summary: "fault host", problems: [] } : null,
      );
    },
    close() {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      return Promise.resolve();
    },
  };
}
