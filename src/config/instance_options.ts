// The optional fields of an instance-type catalog entry beyond its size and
// template: `disk_gib`, `storage`, `clone` and `network`
// (docs/configuration.md#instance-type-catalog). Each error is one line
// naming the entry and the field, like the rest of the catalog's.

import {
  JsonObject,
  type JsonValue,
  kindOf,
  objectFields,
  onlyFields,
  positiveInt,
} from "./json.ts";
import { quote } from "./errors.ts";
import { zoneMap } from "./templates.ts";
import type { InstanceType, NicSettings, StorageTarget } from "./types.ts";

/** The catalog fields this module reads. */
export const OPTION_FIELDS = ["disk_gib", "storage", "clone", "network"] as const;

/** pve-storage's storage id format (`pve-storage-id`). */
const STORAGE_ID = /^[a-z][a-z0-9\-_.]*[a-z0-9]$/i;

/** qemu-server's `bridge` of a NIC (`[-_.\w\d]+`). */
const BRIDGE = /^[-_.\w\d]+$/;

const NETWORK_FIELDS = ["bridge", "tag", "mtu"];

type Options = Pick<InstanceType, "diskGib" | "storage" | "clone" | "network">;

/** The entry's optional fields, only those it sets (an absent field is no key). */
export function entryOptions(fields: ReadonlyMap<string, JsonValue>, where: string): Options {
  const out: Options = {};
  const present = (k: string) => fields.get(k) !== undefined && fields.get(k) !== null;
  if (present("disk_gib")) out.diskGib = positiveInt(fields.get("disk_gib"), `${where}: disk_gib`);
  if (present("storage")) out.storage = storageTarget(fields.get("storage")!, where);
  if (present("clone")) out.clone = cloneMode(fields.get("clone")!, where);
  if (present("network")) out.network = nicSettings(fields.get("network")!, where);
  if (out.clone === "linked" && out.storage !== undefined) {
    throw new Error(
      `${where}: storage cannot be set with clone "linked" (a linked clone's disks stay on the ` +
        "template's storage, next to the base disks they share); drop one",
    );
  }
  return out;
}

function storageId(v: JsonValue, what: string): string {
  if (typeof v !== "string") throw new Error(`${what} must be a string, got ${kindOf(v)}`);
  if (!STORAGE_ID.test(v)) throw new Error(`${what} ${quote(v)} is not a Proxmox storage id`);
  return v;
}

/** `"local-lvm"`, or `{"pve1": "local-lvm", "pve2": "fast"}` (zones absent: the template's). */
function storageTarget(v: JsonValue, where: string): StorageTarget {
  if (!(v instanceof JsonObject)) {
    return { kind: "one", storage: storageId(v, `${where}: storage`) };
  }
  return { kind: "per-zone", storages: zoneMap(v, `${where}: storage`, storageId) };
}

function cloneMode(v: JsonValue, where: string): "full" | "linked" {
  if (v === "full" || v === "linked") return v;
  const got = typeof v === "string" ? quote(v) : kindOf(v);
  throw new Error(`${where}: clone must be "full" or "linked", got ${got}`);
}

/** `{"bridge": "vmbr1", "tag": 30, "mtu": 9000}`. */
function nicSettings(v: JsonValue, where: string): NicSettings {
  const at = `${where}: network`;
  const fields = objectFields(v, at);
  onlyFields(fields, NETWORK_FIELDS, at);
  const bridge = fields.get("bridge");
  if (bridge === undefined || bridge === null) throw new Error(`${at}.bridge is required`);
  if (typeof bridge !== "string") {
    throw new Error(`${at}.bridge must be a string, got ${kindOf(bridge)}`);
  }
  if (!BRIDGE.test(bridge)) throw new Error(`${at}.bridge ${quote(bridge)} is not a bridge name`);
  const out: NicSettings = { bridge };
  const tag = fields.get("tag");
  if (tag !== undefined && tag !== null) {
    out.tag = positiveInt(tag, `${at}.tag`);
    if (out.tag > 4094) throw new Error(`${at}.tag must be a VLAN id 1-4094, got ${out.tag}`);
  }
  const mtu = fields.get("mtu");
  if (mtu !== undefined && mtu !== null) {
    out.mtu = positiveInt(mtu, `${at}.mtu`);
    // Proxmox takes 1 ("the bridge's") and refuses below the IP minimum at start.
    if (out.mtu !== 1 && (out.mtu < 576 || out.mtu > 65520)) {
      throw new Error(`${at}.mtu must be 576-65520 (or 1: the bridge's), got ${out.mtu}`);
    }
  }
  return out;
}

/** The storage a full clone of `it` in `zone` goes to; null: the template's own. */
export function storageFor(it: InstanceType, zone: string): string | null {
  const s = it.storage;
  if (s === undefined) return null;
  return s.kind === "one" ? s.storage : s.storages.get(zone) ?? null;
}

/** The zones an entry's per-zone storage map names. */
export function storageZones(it: InstanceType): string[] {
  return it.storage?.kind === "per-zone" ? [...it.storage.storages.keys()] : [];
}
