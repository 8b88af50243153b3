// datacenter.cfg as `GET /cluster/options` shows it to the token: with
// Sys.Audit on / all of it (the tag policy `user-tag-access` and
// `registered-tags`, the VMID range `next-id`), without it only
// `allowed-tags`, the tags the token may set outside `free` mode
// (pve-manager API2/Cluster.pm get_options, PVE/DataCenterConfig.pm;
// docs/proxmox-notes.md "Tag policy", "VMID allocation and clone races").

import type { ApiClient } from "../api/client.ts";

export type TagMode = "free" | "list" | "existing" | "none";

export interface DatacenterOptions {
  /** The token could read the whole file (Sys.Audit on /); else the fields below are unknown. */
  readable: boolean;
  /** `user-tag-access` user-allow (default free) and its literal list. */
  tagMode: TagMode;
  allowList: string[];
  registeredTags: string[];
  /** The tags the token may set or remove even outside `free` (registered ones left out). */
  allowedTags: string[];
  /** `next-id`: where /cluster/nextid searches, lower inclusive, upper exclusive. */
  nextId: { lower: number; upper: number };
}

/** PVE's own defaults for next-id. */
export const DEFAULT_NEXT_ID = { lower: 100, upper: 1_000_000 };

const strings = (v: unknown): string[] =>
  Array.isArray(v)
    ? v.map(String)
    : typeof v === "string" && v !== ""
    ? v.split(/[;,\s]+/).filter(Boolean)
    : [];

export async function readDatacenterOptions(
  api: ApiClient,
  signal: AbortSignal,
): Promise<DatacenterOptions> {
  const o = (await api.get<Record<string, unknown>>("/cluster/options", undefined, signal)) ?? {};
  // Only console, tag-style and allowed-tags are given to a token without Sys.Audit on /.
  const readable = Object.keys(o).some((k) =>
    !["console", "tag-style", "allowed-tags"].includes(k)
  );
  const access = (o["user-tag-access"] ?? {}) as Record<string, unknown>;
  const mode = String(access["user-allow"] ?? "free");
  const range = (o["next-id"] ?? {}) as Record<string, unknown>;
  const num = (v: unknown, d: number) => {
    const n = Number(v);
    return v !== undefined && Number.isInteger(n) ? n : d;
  };
  return {
    readable,
    tagMode: (["free", "list", "existing", "none"].includes(mode) ? mode : "free") as TagMode,
    allowList: strings(access["user-allow-list"]),
    registeredTags: strings(o["registered-tags"]),
    allowedTags: strings(o["allowed-tags"]),
    nextId: {
      lower: num(range.lower, DEFAULT_NEXT_ID.lower),
      upper: num(range.upper, DEFAULT_NEXT_ID.upper),
    },
  };
}
