// What a node can still take, from figures alone (no state, no I/O): a node's
// memory and CPUs, what is held on it, and the operator's policy give its
// free memory and vCPUs; an instance type fits when both cover it and it has
// no more vCPUs than the node has CPUs (Proxmox starts no such VM). The texts
// of every refusal live here, so Create, admission, preflight and the startup
// check say the same thing (docs/troubleshooting.md#create-refused-no-room).

import type { NodePolicy } from "../../config/room.ts";
import { describePolicy } from "../../config/room.ts";

const MIB = 1024 * 1024;

/** What a node is made of, as /nodes lists it; null figures: not visible to the token. */
export interface NodeFigures {
  /** Physical memory in MiB. */
  memoryMib: number;
  /** Logical CPUs. */
  cpus: number;
}

/** Why a node's room cannot be judged now; null when it can. */
export type NodeCondition =
  | { kind: "offline" }
  | { kind: "unknown" }
  | { kind: "hidden" }
  | { kind: "unread" }
  | null;

/** What guests (and accepted Creates) hold on a node. */
export interface Held {
  memoryMib: number;
  vcpus: number;
}

/** A node's room under its policy. */
export interface NodeRoom {
  node: string;
  /** Null when figures are known and the node is online. */
  condition: NodeCondition;
  figures: NodeFigures | null;
  policy: NodePolicy;
  /** Memory and vCPUs guests may hold in all under the policy (vCPUs: Infinity for no bound). */
  capacity: Held;
  held: Held;
}

/** The sizing a type asks of a node. */
export interface Need {
  name: string;
  vcpu: number;
  memoryMib: number;
}

/** Memory and vCPUs guests may hold on a node of `figures` under `policy`. */
export function capacityOf(figures: NodeFigures, policy: NodePolicy): Held {
  const r = policy.memoryReserve;
  const reserve = "mib" in r ? r.mib : Math.ceil(figures.memoryMib * r.percent / 100);
  return {
    memoryMib: Math.max(0, Math.floor((figures.memoryMib - reserve) * policy.memoryOvercommit)),
    vcpus: policy.cpuOvercommit === 0 ? Infinity : Math.floor(figures.cpus * policy.cpuOvercommit),
  };
}

/** Free memory and vCPUs (never below 0). */
export function freeOf(room: NodeRoom): Held {
  return {
    memoryMib: Math.max(0, room.capacity.memoryMib - room.held.memoryMib),
    vcpus: Math.max(0, room.capacity.vcpus - room.held.vcpus),
  };
}

/** Bytes (as the API gives them) in whole MiB. */
export function mibOf(bytes: number): number {
  return Math.floor(bytes / MIB);
}

/** Why `node` cannot be judged at all, or null. */
export function conditionRefusal(node: string, c: NodeCondition): string | null {
  if (c === null) return null;
  switch (c.kind) {
    case "offline":
      return `node ${node} is offline in the cluster: nothing is cloned there until it is back`;
    case "unknown":
      return `node ${node} reports no status (it may have just rejoined the cluster, or ` +
        "pvestatd has not reported yet): its room cannot be checked; try again shortly";
    case "hidden":
      return `the API token cannot see node ${node}'s memory and CPUs: grant it Sys.Audit on ` +
        `/nodes/${node} (deploy/host-setup/setup-token.sh does)`;
    case "unread":
      return `the cluster's node list (GET /nodes) could not be read, so node ${node}'s room is ` +
        "not known: nothing is cloned until it is";
  }
}

/** Why a type can never fit a node of these figures under its policy, or null. */
export function neverFits(node: string, figures: NodeFigures, policy: NodePolicy, need: Need) {
  if (need.vcpu > figures.cpus) {
    return `${need.name} has ${need.vcpu} vCPUs and node ${node} has ${figures.cpus} CPUs ` +
      "(Proxmox starts no VM with more vCPUs than its node has CPUs)";
  }
  const cap = capacityOf(figures, policy);
  if (need.memoryMib > cap.memoryMib || need.vcpu > cap.vcpus) {
    return `${need.name} needs ${sizeText(need)} and node ${node} can give at most ` +
      `${heldText(cap)} to guests (${figures.memoryMib} MiB, ${figures.cpus} CPUs; ` +
      `${describePolicy(policy)})`;
  }
  return null;
}

/** Why `need` does not fit the room left on a node now, or null when it fits. */
export function fitRefusal(room: NodeRoom, need: Need): string | null {
  const cond = conditionRefusal(room.node, room.condition);
  if (cond !== null) return cond;
  const never = neverFits(room.node, room.figures!, room.policy, need);
  if (never !== null) return never;
  const free = freeOf(room);
  if (need.memoryMib <= free.memoryMib && need.vcpu <= free.vcpus) return null;
  return `node ${room.node} has no room for ${need.name}: it needs ${sizeText(need)}, ` +
    `${heldText(free)} free (guests hold ${heldText(room.held)} of ${
      heldText(room.capacity)
    } under the policy: ${describePolicy(room.policy)})`;
}

/** How many more of `need` fit the room left now (0 when the node cannot be judged). */
export function slotsThatFit(room: NodeRoom, need: Need): number {
  if (room.condition !== null || neverFits(room.node, room.figures!, room.policy, need) !== null) {
    return 0;
  }
  const free = freeOf(room);
  const byMemory = Math.floor(free.memoryMib / need.memoryMib);
  const byCpu = free.vcpus === Infinity ? Infinity : Math.floor(free.vcpus / need.vcpu);
  return Math.min(byMemory, byCpu);
}

function sizeText(need: Need): string {
  return `${need.memoryMib} MiB and ${need.vcpu} vCPUs`;
}

function heldText(h: Held): string {
  const cpu = h.vcpus === Infinity ? "any number of" : String(h.vcpus);
  return `${h.memoryMib} MiB and ${cpu} vCPUs`;
}
