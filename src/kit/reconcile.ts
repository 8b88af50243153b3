// The reconcile pass (docs/design.md#capacity-changes-and-boot): the backend
// describes its hosts, the plan says what that changes, and the change is
// applied and answered like a lifecycle call. The first pass runs as the
// provider starts serving, then one per interval (src/app.ts).

import { getLogger } from "@logtape/logtape";
import type { Answers } from "./answers.ts";
import type { ReconcileResult } from "./api.ts";
import type { Backend, ManagedVm } from "./backend.ts";
import { orphanId, orphanMachine } from "./boot.ts";
import type { Fleet } from "./fleet.ts";
import { State } from "./model.ts";
import type { MachineRecord } from "./model.ts";

export interface ReconcileDeps {
  provider: string;
  backend: Backend;
  fleet: Fleet;
  answers: Answers;
}

const log = getLogger(["bigfleet", "kit"]);

/** One pass: describe, plan against the fleet as it is after the describe, apply, answer. */
export async function reconcilePass(
  deps: ReconcileDeps,
  signal: AbortSignal,
): Promise<ReconcileResult> {
  const { provider, backend, fleet, answers } = deps;
  answers.refuseWhileFinishing();
  const since = fleet.revision;
  const vms = await backend.describe(signal);
  return await answers.answer(() => {
    const plan = planReconcile(
      provider,
      vms,
      (id) => fleet.get(id),
      (id) => (fleet.modifiedAt(id) ?? 0) > since,
    );
    for (const m of plan.put) fleet.put(m);
    for (const f of plan.failedHosts) {
      log.warn(
        "FAILED machine {machineId} still has its VM {hostRef} on the substrate; nothing " +
          "was destroyed: recover it (bigfleet-proxmox machines recover)",
        { machineId: f.id, hostRef: f.hostRef, cloning: f.cloning },
      );
    }
    for (const r of plan.rejoined) {
      log.warn(
        "SPECULATIVE machine {machineId} has a VM {hostRef} the state did not know (an " +
          "older state restored?): it rejoins its slot IDLE",
        { machineId: r.id, hostRef: r.hostRef },
      );
    }
    return {
      changed: plan.followed + plan.failedHosts.length,
      orphans: plan.orphans,
      rejoined: plan.rejoined.length,
    };
  });
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
