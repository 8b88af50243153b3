// GET /storage (storage.cfg as the token may see it), a storage's status on
// a node, and the storage entries of /cluster/resources.

import { fail, forbidden, paramError, TaskFailure } from "../errors.ts";
import { takeVolumeFailure } from "../faults.ts";
import { NODE } from "../params.ts";
import type { Params } from "../params.ts";
import type { Route, RouteCtx, SimCore } from "../router.ts";
import {
  availableOn,
  driveFile,
  isDriveKey,
  type StorageRecord,
  volumeStorage,
} from "../storage.ts";
import { hasPriv, requireOnVm, requirePriv } from "../acl.ts";
import { storageUse } from "../diskuse.ts";
import { checkNode } from "./nodes.ts";
import { statusHeld } from "../multinode.ts";

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
  // A node's storages stay `available` while its last status is held (multinode.ts).
  const gone = (n: string) => offlineNodes.includes(n) && !statusHeld(core, n);
  const out: Record<string, unknown>[] = [];
  const used = storageUse(core);
  for (const n of core.state.nodes) {
    const visible = visibleStorages(core);
    for (const s of visible) {
      if (!availableOn(s, n)) continue;
      const down = gone(n) || offlineStorages.includes(s.id);
      out.push({
        id: `storage/${n}/${s.id}`,
        type: "storage",
        storage: s.id,
        node: n,
        status: down ? "unknown" : "available",
        plugintype: s.type,
        content: s.content,
        shared: s.shared ? 1 : 0,
        ...(down ? {} : { maxdisk: s.totalBytes, disk: used(s, n) }),
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
      const used = storageUse(core)(s, node);
      return {
        type: s.type,
        content: s.content,
        shared: s.shared ? 1 : 0,
        enabled: 1,
        active: active ? 1 : 0,
        ...(active ? { total: s.totalBytes, used, avail: s.totalBytes - used } : {}),
      };
    },
  },
  {
    // API2/Storage/Content.pm info (user => 'all'): check_volume_access, then
    // volume_size_info, which fails with the plugin's own words for a volume
    // that is not there (read from pve-storage's sources, not seen on a cluster).
    method: "GET",
    pattern: "/nodes/{node}/storage/{storage}/content/{volume}",
    schema: { node: NODE, storage: { type: "string", optional: true }, volume: { type: "string" } },
    perm: (p) => [`/storage/${p.storage}`, "Datastore.Allocate"],
    handler: (ctx) => volumeInfo(ctx),
  },
  {
    // API2/Storage/Content.pm delete: Datastore.Allocate on the storage (not
    // AllocateSpace), then an imgdel worker that frees the volume.
    method: "DELETE",
    pattern: "/nodes/{node}/storage/{storage}/content/{volume}",
    schema: {
      node: NODE,
      storage: { type: "string", optional: true },
      volume: { type: "string" },
      delay: { type: "integer", optional: true, min: 1, max: 30 },
    },
    perm: (p) => [`/storage/${p.storage}`, "Datastore.Allocate"],
    handler: (ctx) => deleteVolume(ctx),
  },
];

/** real_volume_id: `sid:name`, or a bare name completed with the `storage` parameter. */
function volumeId(p: Params): { volid: string; storage: string } {
  const volume = p.volume as string;
  const given = p.storage as string | undefined;
  if (volume.includes(":")) {
    const sid = volumeStorage(volume);
    if (sid === null) throw paramError({ volume: `unable to parse volume ID '${volume}'` });
    if (given !== undefined && given !== sid) {
      throw paramError({ volume: `storage ID mismatch (${sid} != ${given})` });
    }
    return { volid: volume, storage: sid };
  }
  if (given === undefined) {
    throw paramError({ volume: "no storage specified - incomplete volume ID" });
  }
  return { volid: `${given}:${volume}`, storage: given };
}

/**
 * pve-storage check_volume_access for a VM's image: Datastore.Allocate on the
 * storage does; else Datastore.Audit there and VM.Config.Disk on the VM that
 * owns it (for a VM destroyed since, through no pool: 403).
 */
function checkVolumeAccess(core: SimCore, storage: string, volid: string): void {
  const acl = core.faults.acl;
  if (acl === null || hasPriv(acl, `/storage/${storage}`, "Datastore.Allocate")) return;
  const owner = volumeOwner(volid);
  if (owner === undefined) throw fail(`missing privileges to access ${volid}`);
  requirePriv(core, `/storage/${storage}`, "Datastore.Audit");
  requireOnVm(core, Number(owner), "VM.Config.Disk");
}

/** The VMID a volume name belongs to (`vm-<id>-…`, `base-<id>-…`), if any. */
function volumeOwner(volid: string): string | undefined {
  return /(?:^|[:/])(?:vm|base)-(\d+)-/.exec(volid)?.[1];
}

/** Whether `volid` is on its storage as seen from `node`: a VM's drive or unused disk, or left behind. */
function volumeExists(core: SimCore, node: string, volid: string, shared: boolean): boolean {
  const left = core.state.leftovers.get(volid);
  if (left !== undefined) return shared || left.node === node;
  for (const vm of core.state.vms.values()) {
    if (!shared && vm.node !== node) continue;
    for (const [key, value] of Object.entries(vm.config)) {
      if ((isDriveKey(key) || /^unused\d+$/.test(key)) && driveFile(value) === volid) return true;
    }
  }
  return false;
}

function volumeInfo({ core, params }: RouteCtx): Record<string, unknown> {
  const node = params.node as string;
  checkNode(core, node);
  const { volid, storage } = volumeId(params);
  const s = core.state.storages.get(storage);
  if (s === undefined) throw fail(`storage '${storage}' does not exist`);
  checkVolumeAccess(core, storage, volid);
  if (!volumeExists(core, node, volid, s.shared)) {
    const name = volid.slice(storage.length + 1);
    throw fail(
      s.type === "rbd"
        ? `rbd error: rbd: error opening image ${
          name.split("/").at(-1)
        }: (2) No such file or directory`
        : `volume_size_info on '${volid}' failed - no format`,
    );
  }
  const format = /\.(qcow2|vmdk|raw)$/.exec(volid)?.[1] ?? "raw";
  return { path: `/dev/null/${volid}`, size: 34359738368, used: 0, format };
}

function deleteVolume({ core, params, authid }: RouteCtx): string {
  const node = params.node as string;
  checkNode(core, node);
  const { volid, storage } = volumeId(params);
  if (!core.state.storages.has(storage)) throw fail(`storage '${storage}' does not exist`);
  requirePriv(core, `/storage/${storage}`, "Datastore.Allocate");
  const owner = /(?:^|[:/])(?:vm|base)-(\d+)-/.exec(volid)?.[1];
  const id = owner !== undefined ? `${owner}@${storage}` : storage;
  return core.tasks.start(node, "imgdel", id, authid, async (task) => {
    await core.timers.sleep(core.state.timing.taskMs);
    if (!core.state.leftovers.has(volid)) {
      // Freeing a volume that is gone already only notes it (dir storages).
      task.log.push(`disk image '${volid}' does not exist`);
    } else {
      const error = takeVolumeFailure(core.faults, volid);
      if (error !== undefined) throw new TaskFailure(error);
      core.state.leftovers.delete(volid);
    }
    task.log.push(`Removed volume '${volid}'`);
  }).upid;
}
