// The bound on clone tasks at once, per node and storage (docs/proxmox-notes.md
// "Storage locks"): every disk a clone allocates takes the storage's lock in
// vdisk_alloc, the node's for a local storage and the cluster's for a shared
// one, and too many clones at once time out on it.

import { getLogger } from "@logtape/logtape";
import { createKeyedLimit } from "../../async/limit.ts";
import {
  readStorages,
  type StorageInfo,
  type TemplateRef,
  templateVolumes,
} from "../cluster/templates.ts";
import type { ProxmoxContext } from "../context.ts";
import type { VmConfig } from "../vm/vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** How long storage.cfg as read is used while it lacks a storage a template names. */
const STORAGES_MAX_AGE_MS = 60_000;

export interface CloneSlots {
  /**
   * Run `fn` (one clone of `tmpl`) holding a place on every storage the clone allocates on:
   * `target` when it names one, else the template's.
   */
  run<T>(
    tmpl: TemplateRef,
    fn: () => Promise<T>,
    signal: AbortSignal,
    target?: string | null,
  ): Promise<T>;
}

/** Places for `clonesPerStorage` clones at once per node and storage (0: no bound). */
export function createCloneSlots(ctx: ProxmoxContext, clonesPerStorage: number): CloneSlots {
  const { api, timing } = ctx;
  const places = createKeyedLimit(clonesPerStorage);
  /** storage.cfg as the token sees it, read when a clone first needs it. */
  let storages: { at: number; map: Promise<Map<string, StorageInfo>> } | null = null;

  /**
   * The places a clone of `tmpl` takes while its task runs: one per storage
   * its disks are allocated on, where vdisk_alloc's lock lives (the node's
   * for local storage, the cluster's for shared storage).
   */
  async function storageKeys(tmpl: TemplateRef, target: string | null): Promise<string[]> {
    const ids = new Set(copiedVolumes(tmpl.config).map((v) => target ?? v.storage ?? ""));
    if (ids.size === 0) return [`${tmpl.node} *`];
    const read = () => ({
      at: Date.now(),
      // Shared by every Create, so not cut short by one of them. Storages the
      // token cannot see count as local: the stricter of the two bounds (all
      // of them while storage.cfg cannot be read).
      map: readStorages(api, AbortSignal.timeout(timing.requestTimeoutMs)).catch((err) => {
        log.debug("could not read storage.cfg ({error}); every storage counts as local", {
          error: (err as Error).message,
        });
        return new Map<string, StorageInfo>();
      }),
    });
    storages ??= read();
    let map = await storages.map;
    if ([...ids].some((id) => !map.has(id)) && Date.now() - storages.at > STORAGES_MAX_AGE_MS) {
      storages = read();
      map = await storages.map;
    }
    const keys = [...ids].map((id) => map.get(id)?.shared ? `cluster ${id}` : `${tmpl.node} ${id}`);
    return keys.sort();
  }

  return {
    async run<T>(tmpl: TemplateRef, fn: () => Promise<T>, signal: AbortSignal, target = null) {
      const keys = await storageKeys(tmpl, target);
      // Places are taken in key order, so no two clones deadlock.
      const held = keys.reduceRight<() => Promise<T>>(
        (inner, key) => () => places.run(key, inner, signal),
        fn,
      );
      return await held();
    },
  };
}

/** The template volumes a full clone allocates anew: disks and the cloud-init drive, not ISOs. */
function copiedVolumes(config: VmConfig | null) {
  if (config === null) return [];
  return templateVolumes(config).filter((v) =>
    !/(?:^|,)media=cdrom(?:,|$)/.test(String(config[v.key])) || /cloudinit/.test(v.volid)
  );
}
