// Template sources: from --template-vmid / --template-name and from a catalog
// entry's template_vmid / template_name, and the check that every offering's
// zone has a template (docs/configuration.md#templates-one-per-node-or-one-on-shared-storage).

import { JsonObject, type JsonValue, kindOf, positiveInt } from "./json.ts";
import { quote } from "./errors.ts";
import { checkSegment } from "./segment.ts";
import type { InstanceType, TemplateSource } from "./types.ts";

/** Proxmox accepts VMIDs 100..999999999. */
const MIN_VMID = 100;
const MAX_VMID = 999_999_999;

/** Proxmox VM names are DNS names: labels of letters, digits and inner hyphens. */
const VM_NAME =
  /^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$/;

/** Validate a VMID value from a file or flag. */
export function vmid(v: JsonValue | undefined, what: string): number {
  const n = positiveInt(v, what);
  if (n < MIN_VMID || n > MAX_VMID) {
    throw new Error(`${what} must be ${MIN_VMID}-${MAX_VMID}, got ${n}`);
  }
  return n;
}

/** `pve1=9000,pve2=9001` (the text of --template-vmid when it holds a `=`). */
export function parseZoneVmids(text: string): TemplateSource {
  const vmids = new Map<string, number>();
  for (const part of text.split(",")) {
    const pair = part.trim();
    const eq = pair.indexOf("=");
    if (eq < 0) {
      throw new Error(`want zone=VMID pairs (e.g. pve1=9000,pve2=9001), got ${quote(pair)}`);
    }
    const zone = pair.slice(0, eq).trim();
    checkSegment(zone, `${quote(pair)}: zone`);
    if (vmids.has(zone)) throw new Error(`zone ${quote(zone)} listed twice`);
    const raw = pair.slice(eq + 1).trim();
    if (!/^\d+$/.test(raw)) throw new Error(`${quote(pair)}: want an integer VMID`);
    vmids.set(zone, vmid(Number(raw), `VMID of zone ${quote(zone)}`));
  }
  return { kind: "per-zone", vmids };
}

/** --template-name: a VM name as Proxmox allows it. */
export function parseTemplateName(text: string): TemplateSource {
  const name = text.trim();
  if (!VM_NAME.test(name)) {
    throw new Error(`${quote(text)} is not a Proxmox VM name (a DNS name)`);
  }
  return { kind: "name", name };
}

/**
 * A catalog entry's own template: `template_vmid` (a VMID, or an object of
 * zone → VMID) or `template_name`; null when it names none (0, null or absent)
 * and so takes the default.
 */
export function entryTemplate(
  fields: Map<string, JsonValue>,
  where: string,
): TemplateSource | null {
  const raw = fields.get("template_vmid");
  const rawName = fields.get("template_name");
  const hasVmid = raw !== undefined && raw !== null && raw !== 0;
  const hasName = rawName !== undefined && rawName !== null && rawName !== "";
  if (hasVmid && hasName) {
    throw new Error(`${where}: set template_vmid or template_name, not both`);
  }
  if (hasName) {
    if (typeof rawName !== "string") {
      throw new Error(`${where}: template_name must be a string, got ${kindOf(rawName)}`);
    }
    try {
      return parseTemplateName(rawName);
    } catch (err) {
      throw new Error(`${where}: template_name ${(err as Error).message}`);
    }
  }
  if (!hasVmid) return null;
  if (!(raw instanceof JsonObject)) {
    return { kind: "vmid", vmid: vmid(raw, `${where}: template_vmid`) };
  }
  return { kind: "per-zone", vmids: zoneMap(raw, `${where}: template_vmid`, vmid) };
}

/** A catalog field's `{"<zone>": value, …}`: at least one zone, each a segment, each value read by `read`. */
export function zoneMap<T>(
  raw: JsonObject,
  what: string,
  read: (v: JsonValue, what: string) => T,
): Map<string, T> {
  if (raw.entries.length === 0) throw new Error(`${what} names no zone`);
  const out = new Map<string, T>();
  for (const [zone, v] of raw.entries) {
    checkSegment(zone, `${what} zone`);
    out.set(zone, read(v, `${what} of zone ${quote(zone)}`));
  }
  return out;
}

/** The zones a source names explicitly (per-zone maps only). */
export function namedZones(t: TemplateSource): string[] {
  return t.kind === "per-zone" ? [...t.vmids.keys()] : [];
}

/** For logs and errors: `VM 9000`, `pve1=9000,pve2=9001` or `the template named "x"`. */
export function describeTemplate(t: TemplateSource): string {
  switch (t.kind) {
    case "vmid":
      return `VM ${t.vmid}`;
    case "per-zone":
      return [...t.vmids].map(([z, v]) => `${z}=${v}`).join(",");
    case "name":
      return `the template named ${quote(t.name)}`;
  }
}

/** The first (offering index, type, zone) whose type has no template for that zone, or null. */
export function uncoveredOffering(
  catalog: Map<string, InstanceType>,
  offerings: readonly { instanceType: string; zone: string }[],
): { index: number; instanceType: string; zone: string; template: TemplateSource } | null {
  for (const [index, o] of offerings.entries()) {
    const template = catalog.get(o.instanceType)?.template;
    if (template?.kind === "per-zone" && !template.vmids.has(o.zone)) {
      return { index, instanceType: o.instanceType, zone: o.zone, template };
    }
  }
  return null;
}
