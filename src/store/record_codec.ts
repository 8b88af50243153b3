// Machine records as bytes for the state store. JSON keeps every string
// byte-exact (NUL and control characters are escaped and restored), and maps
// are arrays of pairs so keys like "__proto__" survive.
//
// A restored fleet repeats a few instance types, zones and resource maps
// thousands of times, in runs (records load in id order, and ids start with
// the offering). Decoded records share one copy of each value seen among the
// last few decoded (records are immutable, so sharing is safe), as records
// built from the same offering do; a fleet of all-different values decodes
// the same, only unshared.

import { NO_OPS, NO_PAIRS, State } from "../kit/model.ts";
import type { MachineRecord, OpKind, Pairs } from "../kit/model.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const STATES = new Set<number>(Object.values(State));
const RECENT = 8;

/** The last few distinct values of one field, newest first. */
class Recent<T> {
  readonly #values: T[] = [];

  /** A recent value `same` accepts, or `make()` remembered as the newest. */
  share(same: (v: T) => boolean, make: () => T): T {
    for (const v of this.#values) if (same(v)) return v;
    const v = make();
    this.#values.unshift(v);
    if (this.#values.length > RECENT) this.#values.pop();
    return v;
  }
}

const recentStrings = {
  instanceType: new Recent<string>(),
  zone: new Recent<string>(),
  cluster: new Recent<string>(),
};
const recentPairs = {
  resources: new Recent<Pairs>(),
  allocatable: new Recent<Pairs>(),
  labels: new Recent<Pairs>(),
};

function sharedStr(recent: Recent<string>, v: unknown): string {
  const s = str(v);
  return recent.share((r) => r === s, () => s);
}

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
    instanceType: sharedStr(recentStrings.instanceType, raw.instanceType),
    zone: sharedStr(recentStrings.zone, raw.zone),
    capacityType: Number(raw.capacityType ?? 0),
    pricePerHour: Number(raw.pricePerHour ?? 0),
    interruptionProbability: Number(raw.interruptionProbability ?? 0),
    resources: sharedPairs(recentPairs.resources, raw.resources),
    allocatable: sharedPairs(recentPairs.allocatable, raw.allocatable),
    labels: sharedPairs(recentPairs.labels, raw.labels),
    cluster: sharedStr(recentStrings.cluster, raw.cluster),
    shardMetadata: pairs(raw.shardMetadata),
    lastError: str(raw.lastError),
    ops: ops(raw.ops),
    orphan: raw.orphan === true,
  };
}

// ---- The packed form, for base pages (src/store/kv_base.ts) ------------------
//
// A record as a positional array, its most repeated values (instance type,
// zone, cluster, resources, allocatable, labels) as indexes into a dictionary
// shared by the page: about a third of the JSON of `recordJson`, parsed
// several times faster, and decoded records share those values exactly.

/** Values a page's records refer to by index; built by `packer`, read by `unpacker`. */
export type Dictionary = (string | Pairs)[];

const OP_KINDS = ["create", "configure", "drain", "delete"] as const;

/** Packs records against one dictionary (one per page). */
export function packer(): { dictionary: Dictionary; pack(m: MachineRecord): unknown[] } {
  const dictionary: Dictionary = [];
  const strings = new Map<string, number>();
  // Maps by identity first: records of one offering share their arrays, so
  // most lookups need no JSON of the map.
  const maps = new Map<Pairs, number>();
  const mapsByJson = new Map<string, number>();
  const ref = (v: string | Pairs) => {
    if (typeof v === "string") {
      let i = strings.get(v);
      if (i === undefined) strings.set(v, i = dictionary.push(v) - 1);
      return i;
    }
    let i = maps.get(v);
    if (i === undefined) {
      const json = JSON.stringify(v);
      i = mapsByJson.get(json);
      if (i === undefined) mapsByJson.set(json, i = dictionary.push(v) - 1);
      maps.set(v, i);
    }
    return i;
  };
  return {
    dictionary,
    pack: (m) => [
      m.id,
      m.state,
      m.hostRef,
      ref(m.instanceType),
      ref(m.zone),
      m.capacityType,
      m.pricePerHour,
      m.interruptionProbability,
      ref(m.resources),
      ref(m.allocatable),
      ref(m.labels),
      ref(m.cluster),
      m.shardMetadata,
      m.lastError,
      OP_KINDS.map((k) => m.ops[k] ?? ""),
      m.orphan ? 1 : 0,
    ],
  };
}

/** Reads records packed against `dictionary`; throws on anything `packer` would not write. */
export function unpacker(dictionary: unknown): (t: unknown) => MachineRecord {
  if (!Array.isArray(dictionary)) throw corruptPage();
  const values = dictionary.map((v) => typeof v === "string" ? v : strictPairs(v));
  const strAt = (i: unknown) => {
    const v = values[i as number];
    if (typeof v !== "string") throw corruptPage();
    return v;
  };
  const pairsAt = (i: unknown) => {
    const v = values[i as number];
    if (!Array.isArray(v)) throw corruptPage();
    return v;
  };
  return (t) => {
    if (!Array.isArray(t) || t.length !== 16) throw corruptPage();
    const [id, state, hostRef, type, zone, capacityType, price, interruption] = t;
    if (typeof id !== "string" || id === "" || !STATES.has(state)) throw corruptPage();
    let ops: Partial<Record<OpKind, string>> | null = null;
    const opIds = t[14];
    if (!Array.isArray(opIds) || opIds.length !== OP_KINDS.length) throw corruptPage();
    OP_KINDS.forEach((k, i) => {
      if (typeof opIds[i] !== "string") throw corruptPage();
      if (opIds[i] !== "") (ops ??= {})[k] = opIds[i];
    });
    return {
      id,
      state,
      hostRef: strictStr(hostRef),
      instanceType: strAt(type),
      zone: strAt(zone),
      capacityType: strictNumber(capacityType),
      pricePerHour: strictNumber(price),
      interruptionProbability: strictNumber(interruption),
      resources: pairsAt(t[8]),
      allocatable: pairsAt(t[9]),
      labels: pairsAt(t[10]),
      cluster: strAt(t[11]),
      shardMetadata: nonEmpty(strictPairs(t[12])),
      lastError: strictStr(t[13]),
      ops: ops ?? NO_OPS,
      orphan: t[15] === 1,
    };
  };
}

function strictStr(v: unknown): string {
  if (typeof v !== "string") throw corruptPage();
  return v;
}

function strictNumber(v: unknown): number {
  if (typeof v !== "number") throw corruptPage();
  return v;
}

function strictPairs(v: unknown): Pairs {
  if (!Array.isArray(v)) throw corruptPage();
  for (const p of v) {
    if (
      !Array.isArray(p) || p.length !== 2 || typeof p[0] !== "string" || typeof p[1] !== "string"
    ) {
      throw corruptPage();
    }
  }
  return v as Pairs;
}

function corruptPage(): Error {
  return new Error("state store: corrupt machine record in the packed state");
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

// Missing or null maps reload as empty ones.
function pairs(v: unknown): Pairs {
  if (!Array.isArray(v)) return NO_PAIRS;
  return nonEmpty(
    v.filter((p) => Array.isArray(p) && p.length === 2).map((p) => [str(p[0]), str(p[1])]),
  );
}

/** The shared empty map for an empty one. */
function nonEmpty(p: Pairs): Pairs {
  return p.length === 0 ? NO_PAIRS : p;
}

/** Resources, allocatable and labels: the same few maps across a fleet. */
function sharedPairs(recent: Recent<Pairs>, v: unknown): Pairs {
  return recent.share((r) => sameAsRaw(r, v), () => pairs(v));
}

/** Whether raw JSON `v` holds exactly the pairs `r` (and nothing pairs() would drop). */
function sameAsRaw(r: Pairs, v: unknown): boolean {
  if (!Array.isArray(v) || v.length !== r.length) return false;
  for (let i = 0; i < r.length; i++) {
    const p = v[i];
    if (!Array.isArray(p) || p.length !== 2 || p[0] !== r[i][0] || p[1] !== r[i][1]) return false;
  }
  return true;
}

function ops(v: unknown): MachineRecord["ops"] {
  let out: Partial<Record<OpKind, string>> | null = null;
  if (v && typeof v === "object") {
    for (const kind of OP_KINDS) {
      const id = (v as Record<string, unknown>)[kind];
      if (typeof id === "string" && id !== "") (out ??= {})[kind] = id;
    }
  }
  return out ?? NO_OPS;
}
