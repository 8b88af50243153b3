// The startup check of the offerings against the nodes' room: an instance
// type that no node it is offered on could ever hold (were the node empty)
// stops the provider in one line; a (type, zone) pair that never fits while
// the type fits elsewhere is one WARN, and its Creates are refused. A node
// whose figures the token cannot see, or that is down, is said once.

import { getLogger } from "@logtape/logtape";
import type { Offering } from "../../config/offerings.ts";
import type { InstanceType } from "../../config/types.ts";
import { BackendError } from "../../kit/backend.ts";
import type { ProxmoxContext } from "../context.ts";
import { refreshRoom } from "./room_read.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** Instance type → the zones offering it, in first-seen order. */
export function offeredZones(offerings: readonly Offering[]): Map<string, string[]> {
  return grouped(offerings, (o) => o.instanceType, (o) => o.zone);
}

/** Zone → the instance types offered in it (what the room reports). */
export function offeredTypes(offerings: readonly Offering[]): Map<string, string[]> {
  return grouped(offerings, (o) => o.zone, (o) => o.instanceType);
}

function grouped(
  offerings: readonly Offering[],
  key: (o: Offering) => string,
  value: (o: Offering) => string,
): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const o of offerings) {
    const values = out.get(key(o)) ?? [];
    if (!values.includes(value(o))) values.push(value(o));
    out.set(key(o), values);
  }
  return out;
}

export async function checkOfferingRoom(
  ctx: ProxmoxContext,
  catalog: ReadonlyMap<string, InstanceType>,
  offerings: readonly Offering[],
  signal: AbortSignal,
): Promise<void> {
  try {
    await refreshRoom(ctx, signal);
  } catch (err) {
    log.warn("could not read the nodes' memory and CPUs at startup ({error}); Create checks them", {
      error: (err as Error).message,
    });
    return;
  }
  const known = new Set<string>();
  for (const z of ctx.room.report()) {
    if (z.problem === "") known.add(z.zone);
    else log.warn("zone {zone}: {problem}", { zone: z.zone, problem: z.problem });
  }
  for (const [name, zones] of offeredZones(offerings)) {
    const type = catalog.get(name);
    if (type === undefined) continue;
    const never = zones.map((zone) => ({ zone, why: ctx.room.neverFits(type, zone) }));
    const refused = never.filter((n) => n.why !== null);
    if (zones.every((z) => known.has(z)) && refused.length === zones.length) {
      throw new BackendError(
        `instance type ${name} fits none of the nodes it is offered on (${zones.join(", ")}): ` +
          `${refused.map((n) => n.why).join("; ")}; make it smaller, or offer it on a larger ` +
          "node, or change --proxmox-memory-reserve / --proxmox-memory-overcommit",
      );
    }
    for (const n of refused) {
      log.warn(
        "instance type {type} can never fit zone {zone}: {reason}; its Creates there are refused",
        { type: name, zone: n.zone, reason: n.why },
      );
    }
  }
}
