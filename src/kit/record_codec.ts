// Machine records as bytes for the state store. JSON keeps every string
// byte-exact (NUL and control characters are escaped and restored), and maps
// are arrays of pairs so keys like "__proto__" survive.

import { State } from "./model.ts";
import type { MachineRecord, OpKind, Pairs } from "./model.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const STATES = new Set<number>(Object.values(State));

export function encodeRecord(m: MachineRecord): Uint8Array {
  return enc.encode(JSON.stringify(m));
}

export function decodeRecord(bytes: Uint8Array): MachineRecord {
  const raw = JSON.parse(dec.decode(bytes));
  const state = Number(raw.state);
  if (typeof raw.id !== "string" || raw.id === "" || !STATES.has(state)) {
    throw new Error("corrupt machine record in state store");
  }
  return {
    id: raw.id,
    state: state as State,
    hostRef: str(raw.hostRef),
    instanceType: str(raw.instanceType),
    zone: str(raw.zone),
    capacityType: Number(raw.capacityType ?? 0),
    pricePerHour: Number(raw.pricePerHour ?? 0),
    interruptionProbability: Number(raw.interruptionProbability ?? 0),
    resources: pairs(raw.resources),
    allocatable: pairs(raw.allocatable),
    labels: pairs(raw.labels),
    cluster: str(raw.cluster),
    shardMetadata: pairs(raw.shardMetadata),
    lastError: str(raw.lastError),
    ops: ops(raw.ops),
    orphan: raw.orphan === true,
  };
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

// Missing or null maps reload as empty ones.
function pairs(v: unknown): Pairs {
  if (!Array.isArray(v)) return [];
  return v.filter((p) => Array.isArray(p) && p.length === 2).map((p) => [str(p[0]), str(p[1])]);
}

function ops(v: unknown): Partial<Record<OpKind, string>> {
  const out: Partial<Record<OpKind, string>> = {};
  if (v && typeof v === "object") {
    for (const kind of ["create", "configure", "drain", "delete"] as const) {
      const id = (v as Record<string, unknown>)[kind];
      if (typeof id === "string" && id !== "") out[kind] = id;
    }
  }
  return out;
}
