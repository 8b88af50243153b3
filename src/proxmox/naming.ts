// How a VM is tied to its BigFleet machine: a verbatim marker in the
// description (authoritative), plus a name derived from a sanitized machine
// id (a hint for humans and for cheap pre-filtering of listings) and the
// tags of --proxmox-tags (for humans only: the datacenter's tag policy may
// refuse any of them, docs/proxmox-notes.md "Tag policy").

import { MACHINE_TAG_TOKEN } from "../config/proxmox.ts";

export interface Marker {
  machineId: string;
  operationId: string;
}

export const MANAGED_TAG = "bigfleet";
/** The instance type a managed VM with no slot is listed as (docs/configuration.md#machine-ids-and-host-refs). */
export const ORPHAN_TYPE = "pve.orphan";
const PREFIX = "bigfleet-";
const MAX_NAME = 63;
const MARKER_KEY = "bigfleet-marker:";

/** Lower-case, [a-z0-9-] only, no leading/trailing/double dashes. */
export function sanitizeId(id: string): string {
  return id.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
}

/** 32-bit FNV-1a as 8 hex digits: a stable suffix for truncated names. */
function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(s)) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

/**
 * `bigfleet-<sanitized id>`, a single DNS label of at most 63 characters. Long
 * ids are truncated and suffixed with a hash of the verbatim id so that two
 * long ids sharing a prefix still get different names.
 */
export function vmName(machineId: string): string {
  const s = sanitizeId(machineId);
  const full = PREFIX + s;
  if (s !== "" && full.length <= MAX_NAME) return full;
  const room = MAX_NAME - PREFIX.length - 9;
  const head = s.slice(0, room).replace(/-+$/, "");
  return PREFIX + (head === "" ? "" : head + "-") + fnv1a(machineId);
}

/** Per-machine tag; valid for PVE's `[a-z0-9_][a-z0-9_\-+.]*`. Same text as the name. */
export function machineTag(machineId: string): string {
  return vmName(machineId);
}

/** The configured tags (--proxmox-tags) for one machine: `@machine` becomes its own tag. */
export function resolveTags(configured: readonly string[], machineId: string): string[] {
  return [...new Set(configured.map((t) => t === MACHINE_TAG_TOKEN ? machineTag(machineId) : t))];
}

/** Split a PVE tag list (`;`, `,` or whitespace separated), lower-cased. */
export function parseTags(raw: unknown): string[] {
  if (typeof raw !== "string") return [];
  return raw.split(/[;,\s]+/).filter((t) => t !== "").map((t) => t.toLowerCase());
}

/**
 * JSON with every non-ASCII character and '%' escaped (`\uXXXX`), so the
 * line survives any storage encoding: pve-common before 8.2 writes '%' raw
 * into the config comment but URI-unescapes it on read (docs/proxmox-notes.md).
 */
function asciiJson(v: unknown): string {
  return JSON.stringify(v).replace(
    /[%\u007f-\uffff]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"),
  );
}

/** The VM description: a human line and one machine-readable marker line. */
export function buildDescription(machineId: string, operationId: string): string {
  return `BigFleet managed VM. Do not edit the marker line.\n${MARKER_KEY} ${
    asciiJson({ machine_id: machineId, operation_id: operationId })
  }`;
}

/**
 * Reads the marker back. Also accepts the Go provider's
 * `machine_id=<id> operation_id=<tok>` form so VMs it made are recognised
 * (docs/proxmox-notes.md "The description and `%`").
 */
export function parseMarker(description: unknown): Marker | null {
  if (typeof description !== "string") return null;
  for (const line of description.split("\n")) {
    const t = line.trim();
    if (!t.startsWith(MARKER_KEY)) continue;
    try {
      const v = JSON.parse(t.slice(MARKER_KEY.length));
      if (typeof v?.machine_id === "string" && v.machine_id !== "") {
        return {
          machineId: v.machine_id,
          operationId: typeof v.operation_id === "string" ? v.operation_id : "",
        };
      }
    } catch {
      // A mangled marker is treated as absent.
    }
  }
  const go = /machine_id=(\S+) operation_id=(\S*)/.exec(description);
  return go ? { machineId: go[1], operationId: go[2] } : null;
}

/** A host ref is `<node>/<vmid>` (the kit treats it as opaque) → parts; null when malformed. */
export function parseHostRef(hostRef: string): { node: string; vmid: number } | null {
  const m = /^([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)\/([1-9][0-9]{2,8})$/.exec(hostRef);
  return m ? { node: m[1], vmid: Number(m[2]) } : null;
}

export function hostRefOf(node: string, vmid: number): string {
  return `${node}/${vmid}`;
}
