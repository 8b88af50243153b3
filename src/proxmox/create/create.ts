// Create, as the sequence of steps it performs: (1) check the zone, (2) adopt
// or clone the machine's VM (a clone only into a node with room for it), (3)
// size it, (4) grow its boot disk, (5) set its first NIC, (6) have it running
// with its guest agent up, (7) answer its host ref. Each step is one call into
// the module that does it (adopt.ts, clone.ts, sizing.ts, disk.ts, network.ts,
// ../vm/running.ts); a new step is a line here and a function beside the others.

import { getLogger } from "@logtape/logtape";
import type { InstanceType } from "../../config/types.ts";
import { BackendError, type SlotSpec } from "../../kit/backend.ts";
import { createSingleFlight } from "../../async/single_flight.ts";
import type { NodeCheck } from "../cluster/nodes.ts";
import type { Located } from "../vm/vm.ts";
import type { Observed, ProxmoxContext } from "../context.ts";
import { hostRefOf } from "../naming.ts";
import { ensureRunning } from "../vm/running.ts";
import { findExisting } from "./adopt.ts";
import { type CloneLimits, type CloneNew, createCloner } from "./clone.ts";
import { applySizing, stopToApplySizing } from "./sizing.ts";
import { growBootDisk } from "./disk.ts";
import { applyNetwork } from "./network.ts";

const log = getLogger(["bigfleet", "proxmox"]);

export interface CreateDeps {
  /** The instance types: sizing and template of each. */
  catalog: ReadonlyMap<string, InstanceType>;
  /** The startup check of --nodes: a zone it found missing from the cluster is refused. */
  nodes: NodeCheck;
  limits: CloneLimits;
  observed: Observed;
}

/** The Backend's create: idempotent on the machine id (an earlier attempt's VM is adopted). */
export type Create = (slot: SlotSpec, signal: AbortSignal) => Promise<{ hostRef: string }>;

/** The VMID allocator, the clone bound and the joins live as long as the returned function. */
export function createCreate(ctx: ProxmoxContext, deps: CreateDeps): Create {
  const { observed } = deps;
  const cloneNew = createCloner(ctx, deps.limits);
  const once = createSingleFlight<Located>();

  return async function create(slot, signal) {
    // 1. The zone: the type's catalog entry, and a zone found unusable refused at once.
    const type = checkZone(ctx, deps, slot);
    // The type's room on the node is held from here (or from admission) until the Create ends.
    ctx.room.hold(slot.machineId, type, slot.zone);
    try {
      // Steps 2 to 5 run once per machine at a time: a second Create of it joins the first.
      const vm = await once.run(slot.machineId, () =>
        observed("CloneVM", async () => {
          // 2. The VM an earlier attempt made for the machine, or a clone of the zone's
          //    template if the node still has room for it.
          const vm = await adoptOrClone(ctx, cloneNew, slot, type, signal);
          ctx.room.vmMade(slot.machineId, vm.vmid);
          // 3. Sizing, marker and tags.
          const sized = await applySizing(ctx, vm, slot, type, signal);
          // 4. The boot disk grown to the type's disk_gib (never shrunk; live on a running VM).
          await growBootDisk(ctx, vm, type, slot.machineId, signal);
          // 5. The first NIC on the type's bridge, VLAN and MTU. A running VM takes a new size
          //    or NIC only when it starts again: such a VM is stopped here, and step 6 starts it.
          const nic = await applyNetwork(ctx, vm, type, signal);
          const pendingUntilStart = [...sized.pendingUntilStart, ...nic.pendingUntilStart];
          if (pendingUntilStart.length > 0) {
            await stopToApplySizing(ctx, vm, { pendingUntilStart }, slot.machineId, signal);
          }
          return vm;
        }));
      ctx.memory.created(vm.vmid, slot.machineId);
      // 6. Running, with its guest agent answering.
      await observed("EnsureRunning", () => ensureRunning(ctx, vm, signal));
      log.info("VM {vmid} on {node} is up for machine {machineId}", {
        vmid: vm.vmid,
        node: vm.node,
        machineId: slot.machineId,
      });
      // 7. Where the VM is, for the kit to record.
      return { hostRef: hostRefOf(vm.node, vm.vmid) };
    } finally {
      ctx.room.createEnded(slot.machineId);
    }
  };
}

/** Step 1: the slot's instance type, unless its zone cannot take a Create now. */
function checkZone(ctx: ProxmoxContext, deps: CreateDeps, slot: SlotSpec): InstanceType {
  // Sizing and template come from the catalog entry of the slot's type.
  const type = deps.catalog.get(slot.instanceType);
  if (type === undefined) {
    throw new BackendError(`instance type ${slot.instanceType} is not in the catalog`);
  }
  const refused = deps.nodes.refusal(slot.zone);
  if (refused !== null) throw new BackendError(`zone ${slot.zone}: ${refused}`);
  if (!ctx.nodes.includes(slot.zone)) {
    throw new BackendError(`zone ${slot.zone} is not one of the configured nodes`);
  }
  return type;
}

/** Step 2: adopt the VM already made for the machine (by a previous or concurrent attempt), or clone. */
async function adoptOrClone(
  ctx: ProxmoxContext,
  cloneNew: CloneNew,
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
): Promise<Located> {
  const existing = await findExisting(ctx, slot.machineId, signal);
  if (existing === null) {
    // The search's listing is the freshest there is: the node must still have room (a VM of
    // someone else may have started since admission) and be online.
    const refusal = ctx.room.recheck(slot.machineId, type, slot.zone);
    if (refusal !== null) throw new BackendError(`${refusal}; nothing was cloned`);
    return await cloneNew(slot, type, signal);
  }
  log.info("adopting VM {vmid} on {node} already made for machine {machineId}", {
    vmid: existing.vmid,
    node: existing.node,
    machineId: slot.machineId,
  });
  return existing;
}
