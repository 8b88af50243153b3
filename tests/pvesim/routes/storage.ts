// GET /storage (storage.cfg as the token may see it), a storage's status on
// a node, and the storage entries of /cluster/resources.

import { fail, forbidden } from "../errors.ts";
import { NODE } from "../params.ts";
import type { Route, SimCore } from "../router.ts";
import { availableOn, type StorageRecord } from "../storage.ts";
import { checkNode } from "./nodes.ts";

/** Storages the caller has Datastore.Audit or Datastore.AllocateSpace on; the rest are left out, never 403. */
export function visibleStorages(core: SimCore): StorageRecord[] {
  return [...core.state.storages.values()]
    .filter((s) => !core.faults.hiddenStorages.includes(s.id))
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * One `/cluster/resources` entry per storage and node it exists on. A storage
 * that is offline (faults.offlineStorages, even one storage.cfg does not
 * define here), or on a node that is down, has no usage data: status unknown.
 */
export function storageEntries(core: SimCore): Record<string, unknown>[] {
  const { offlineNodes, offlineStorages } = core.faults;
  const out: Record<string, unknown>[] = [];
  for (const n of core.state.nodes) {
    const visible = visibleStorages(core);
    for (const s of visible) {
      if (!availableOn(s, n)) continue;
      const down = offlineNodes.includes(n) || offlineStorages.includes(s.id);
      out.push({
        id: `storage/${n}/${s.id}`,
        type: "storage",
        storage: s.id,
        node: n,
        status: down ? "unknown" : "available",
        plugintype: s.type,
        content: s.content,
        shared: s.shared ? 1 : 0,
        ...(down ? {} : { maxdisk: s.totalBytes, disk: s.usedBytes }),
      });
    }
    for (const id of offlineStorages) {
      if (visible.some((s) => s.id === id)) continue;
      out.push({
        id: `storage/${n}/${id}`,
        type: "storage",
        storage: id,
        node: n,
        status: "unknown",
        content: "images",
      });
    }
  }
  return out;
}

export const storageRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/storage",
    schema: { type: { type: "string", optional: true } },
    // No privilege check of its own: entries are filtered per storage.
    perm: () => ["/storage", "Datastore.Audit"],
    handler: ({ core, params }) =>
      visibleStorages(core)
        .filter((s) => params.type === undefined || s.type === params.type)
        .map((s) => {
          // storage.cfg as pve-storage parsed it: `shared` only when set (forced for nfs, rbd, ...).
          const e: Record<string, unknown> = {
            storage: s.id,
            type: s.type,
            content: s.content,
            digest: "4a1f0c0e3b8a2d6e9f7c5b3a1d0e8f6c4b2a0918",
          };
          if (s.shared) e.shared = 1;
          if (s.nodes) e.nodes = s.nodes.join(",");
          return e;
        }),
  },
  {
    // pve-storage's status of one storage on one node (needs Datastore.Audit or
    // Datastore.AllocateSpace on /storage/<id>: a hidden storage is a 403 here).
    method: "GET",
    pattern: "/nodes/{node}/storage/{storage}/status",
    schema: { node: NODE, storage: { type: "string" } },
    perm: (p) => [`/storage/${p.storage}`, "Datastore.Audit|Datastore.AllocateSpace"],
    handler: ({ core, params }) => {
      const node = params.node as string;
      const id = params.storage as string;
      checkNode(core, node);
      const s = core.state.storages.get(id);
      if (s === undefined) throw fail(`storage '${id}' does not exist`);
      if (core.faults.hiddenStorages.includes(id)) {
        throw forbidden(`/storage/${id}`, "Datastore.Audit|Datastore.AllocateSpace");
      }
      if (!availableOn(s, node)) throw fail(`storage '${id}' is not available on node '${node}'`);
      const active = !core.faults.offlineStorages.includes(id);
      return {
        type: s.type,
        content: s.content,
        shared: s.shared ? 1 : 0,
        enabled: 1,
        active: active ? 1 : 0,
        ...(active
          ? { total: s.totalBytes, used: s.usedBytes, avail: s.totalBytes - s.usedBytes }
          : {}),
      };
    },
  },
];
