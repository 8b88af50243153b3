// Offerings: what slots exist. Either the built-in mix sized by --seed-count
// or an operator JSON file; both expand into fully described Slots.

import type { Pairs } from "../kit/model.ts";
import type { InstanceType, Slot } from "./types.ts";
import { JsonObject, type JsonValue, kindOf, objectFields, onlyFields, parseJson } from "./json.ts";
import { allocatableOf, sortedNames } from "./catalog.ts";
import { priceOf, type Pricing } from "./pricing.ts";
import { quote } from "./errors.ts";
import { checkSegment } from "./segment.ts";

/** One validated offering: `count` identical slots of a type in a zone. */
export interface Offering {
  instanceType: string;
  zone: string;
  count: number;
  resources: [string, string][];
  labels: [string, string][];
}

/** Keys that carry instance type, zone or capacity type and so never belong in labels (docs/design.md#field-shape). */
const WELL_KNOWN_LABEL_KEYS: ReadonlySet<string> = new Set([
  "instance-type",
  "instance_type",
  "instanceType",
  "zone",
  "availability-zone",
  "availability_zone",
  "capacity-type",
  "capacity_type",
  "capacityType",
]);

/** The members an offering may have (docs/configuration.md#offerings). */
const OFFERING_FIELDS = ["instance_type", "zone", "count", "capacity_type", "resources", "labels"];

/** Every slot of the built-in mix asks for this much. */
const BUILTIN_RESOURCES: readonly [string, string][] = [["cpu", "1"], ["memory", "2Gi"]];

/** on_demand, on-demand, ondemand in any case; the provider has nothing else. */
const ON_DEMAND = /^on[-_]?demand$/i;
const UNSUPPORTED_CAPACITY = /^(spot|reserved|bare[-_]?metal)$/i;

/**
 * The built-in mix: `seedCount` slots over (first, last sorted catalog name) x
 * (first two zones), N/buckets each with the remainder to the first buckets;
 * empty buckets are dropped.
 */
export function builtinOfferings(
  catalog: Map<string, InstanceType>,
  zones: readonly string[],
  seedCount: number,
): Offering[] {
  const names = sortedNames(catalog);
  const types = [...new Set([names[0], names[names.length - 1]])].filter((n) => n !== undefined);
  const useZones = [...new Set(zones.slice(0, 2))];
  const buckets = types.flatMap((t) => useZones.map((z) => [t, z] as const));
  if (buckets.length === 0) return [];
  const base = Math.floor(seedCount / buckets.length);
  const extra = seedCount % buckets.length;
  return buckets
    .map(([instanceType, zone], i) => ({
      instanceType,
      zone,
      count: base + (i < extra ? 1 : 0),
      resources: BUILTIN_RESOURCES.map(([k, v]): [string, string] => [k, v]),
      labels: [],
    }))
    .filter((o) => o.count > 0);
}

/**
 * Parse an offerings file. `allowedZones` is --nodes on the real backend,
 * null on the fake. Throws Error with the problem (the caller names the flag).
 */
export function parseOfferings(
  text: string,
  catalog: Map<string, InstanceType>,
  allowedZones: readonly string[] | null,
): Offering[] {
  const root = parseJson(text);
  if (!Array.isArray(root)) throw new Error(`want an array of offerings, got ${kindOf(root)}`);
  return root.map((item, i) => parseOffering(item, `offering ${i}`, catalog, allowedZones));
}

function parseOffering(
  item: JsonValue,
  where: string,
  catalog: Map<string, InstanceType>,
  allowedZones: readonly string[] | null,
): Offering {
  const fields = objectFields(item, where);
  onlyFields(fields, OFFERING_FIELDS, where);
  const instanceType = requiredString(fields.get("instance_type"), `${where}: instance_type`);
  if (!catalog.has(instanceType)) {
    throw new Error(`${where}: unknown instance type ${quote(instanceType)}`);
  }
  const zone = checkSegment(requiredString(fields.get("zone"), `${where}: zone`), `${where}: zone`);
  if (allowedZones !== null && !allowedZones.includes(zone)) {
    throw new Error(
      `${where}: zone ${quote(zone)} is not one of --nodes (${allowedZones.join(",")})`,
    );
  }
  checkCapacityType(fields.get("capacity_type"), `${where}: capacity_type`);
  const count = fields.get("count");
  if (typeof count !== "number" || !Number.isSafeInteger(count) || count <= 0) {
    const got = typeof count === "number" ? String(count) : kindOf(count ?? null);
    throw new Error(`${where}: count must be a positive integer, got ${got}`);
  }
  const resources = stringPairs(fields.get("resources"), `${where}: resources`);
  const labels = stringPairs(fields.get("labels"), `${where}: labels`);
  for (const [key] of labels) {
    if (WELL_KNOWN_LABEL_KEYS.has(key)) {
      throw new Error(
        `${where}: label ${
          quote(key)
        } is reserved (instance type, zone and capacity type are fields)`,
      );
    }
  }
  return { instanceType, zone, count, resources, labels };
}

/** Expand offerings into slots; the index counts per (type, zone) so ids never collide. */
export function expandSlots(
  offerings: readonly Offering[],
  catalog: Map<string, InstanceType>,
  provider: string,
  pricing: Pricing,
): Slot[] {
  const next = new Map<string, number>();
  const slots: Slot[] = [];
  for (const o of offerings) {
    const it = catalog.get(o.instanceType);
    if (it === undefined) throw new Error(`unknown instance type ${quote(o.instanceType)}`);
    const key = `${o.instanceType}/${o.zone}`;
    const price = priceOf(pricing, catalog, o.instanceType);
    // One frozen copy per offering, shared by its slots and the records built
    // from them: a large fleet would otherwise hold thousands of identical
    // arrays, and frozen, no machine can change another's.
    const allocatable = frozenPairs(allocatableOf(it));
    const resources = frozenPairs(o.resources);
    const labels = frozenPairs(o.labels);
    const first = next.get(key) ?? 0;
    next.set(key, first + o.count);
    const prefix = slotPrefix(provider, o.instanceType, o.zone);
    for (let index = first; index < first + o.count; index++) {
      slots.push({
        // join makes one flat string; `+` makes a cons string, which V8
        // flattens into a second copy the first time the id is hashed.
        id: [prefix, String(index).padStart(3, "0")].join(""),
        instanceType: o.instanceType,
        zone: o.zone,
        pricePerHour: price,
        resources,
        allocatable,
        labels,
      });
    }
  }
  return slots;
}

function frozenPairs(pairs: readonly [string, string][]): Pairs {
  return Object.freeze(pairs.map(([k, v]) => Object.freeze([k, v] as const)));
}

/** `<provider>/OnDemand/<type>/<zone>/<NNN>` (Go `%03d`: at least three digits). */
export function slotId(
  provider: string,
  instanceType: string,
  zone: string,
  index: number,
): string {
  return slotPrefix(provider, instanceType, zone) + String(index).padStart(3, "0");
}

/** What every slot id of one (type, zone) starts with; the index follows. */
function slotPrefix(provider: string, instanceType: string, zone: string): string {
  return `${provider}/OnDemand/${instanceType}/${zone}/`;
}

/** Distinct zones of the offerings in first-seen order. */
export function zonesOf(offerings: readonly Offering[]): string[] {
  return [...new Set(offerings.map((o) => o.zone))];
}

function requiredString(v: JsonValue | undefined, what: string): string {
  if (v === undefined || v === null) throw new Error(`${what} is required`);
  if (typeof v !== "string") throw new Error(`${what} must be a string, got ${kindOf(v)}`);
  if (v.trim() === "") throw new Error(`${what} is empty`);
  return v;
}

function checkCapacityType(v: JsonValue | undefined, what: string): void {
  if (v === undefined || v === null || v === "") return;
  if (typeof v !== "string") throw new Error(`${what} must be a string, got ${kindOf(v)}`);
  if (ON_DEMAND.test(v)) return;
  if (UNSUPPORTED_CAPACITY.test(v)) {
    throw new Error(`${what} ${quote(v)} is not supported: Proxmox machines are on_demand only`);
  }
  throw new Error(`${what} ${quote(v)} is unknown (want on_demand)`);
}

function stringPairs(v: JsonValue | undefined, what: string): [string, string][] {
  if (v === undefined || v === null) return [];
  if (!(v instanceof JsonObject)) throw new Error(`${what} must be an object, got ${kindOf(v)}`);
  return v.entries.map(([key, value]): [string, string] => {
    if (key.trim() === "") throw new Error(`${what}: empty key`);
    if (typeof value !== "string") {
      throw new Error(`${what}: value of ${quote(key)} must be a string, got ${kindOf(value)}`);
    }
    return [key, value];
  });
}
