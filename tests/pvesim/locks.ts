// The two kinds of lock a clone worker takes (docs/proxmox-notes.md "Storage
// locks"): node-local flocks (pve-common PVE::Tools::lock_file_full: shared
// or exclusive, given up after a timeout with `can't lock file '<path>' - got
// timeout`) and cluster-wide pmxcfs locks (pve-cluster PVE::Cluster
// cfs_lock: a directory made under /etc/pve/priv/lock, retried every second,
// given up after 10 s with `cfs-lock '<id>' error: got lock request timeout`).

import { TaskFailure } from "./errors.ts";
import type { Timers } from "./tasks.ts";

/** Who holds one lock: some sharers, or one exclusive holder. */
interface Held {
  shared: number;
  exclusive: boolean;
}

/** Every lock held in the cluster: flocks keyed by node and path, cfs locks by id. */
export class LockTable {
  #held = new Map<string, Held>();

  /** Take the lock if it is free for this mode. */
  tryTake(key: string, shared: boolean): boolean {
    const h = this.#held.get(key) ?? { shared: 0, exclusive: false };
    if (h.exclusive || (!shared && h.shared > 0)) return false;
    if (shared) h.shared++;
    else h.exclusive = true;
    this.#held.set(key, h);
    return true;
  }

  release(key: string, shared: boolean): void {
    const h = this.#held.get(key);
    if (h === undefined) return;
    if (shared) h.shared = Math.max(0, h.shared - 1);
    else h.exclusive = false;
    if (h.shared === 0 && !h.exclusive) this.#held.delete(key);
  }

  isHeld(key: string): boolean {
    return this.#held.has(key);
  }
}

/** A lock to take: a flock on a node, or a pmxcfs lock. */
export type LockSpec =
  | { kind: "flock"; node: string; path: string; shared?: boolean }
  | { kind: "cfs"; id: string };

export function lockKey(spec: LockSpec): string {
  return spec.kind === "flock" ? `${spec.node}:${spec.path}` : `cfs:${spec.id}`;
}

/** The task log line PVE prints while it waits, and the error when it gives up. */
function texts(spec: LockSpec): { waiting: string; timeout: string } {
  return spec.kind === "flock"
    ? {
      waiting: "trying to acquire lock...",
      timeout: `can't lock file '${spec.path}' - got timeout`,
    }
    : {
      waiting: `trying to acquire cfs lock '${spec.id}' ...`,
      timeout: `cfs-lock '${spec.id}' error: got lock request timeout`,
    };
}

/**
 * Take `spec` within `timeoutMs` or throw the TaskFailure PVE dies with;
 * resolves with the release function. `log` gets the waiting line once.
 */
export async function takeLock(
  locks: LockTable,
  timers: Timers,
  spec: LockSpec,
  timeoutMs: number,
  log?: string[],
): Promise<() => void> {
  const key = lockKey(spec);
  const shared = spec.kind === "flock" && spec.shared === true;
  const deadline = Date.now() + timeoutMs;
  let logged = false;
  while (!locks.tryTake(key, shared)) {
    const { waiting, timeout } = texts(spec);
    if (!logged) log?.push(waiting);
    logged = true;
    if (Date.now() >= deadline) throw new TaskFailure(timeout);
    await timers.sleep(Math.min(10, Math.max(1, deadline - Date.now())));
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    locks.release(key, shared);
  };
}

/** The config flock of a VM (qemu-server QemuConfig config_file_lock), on its node. */
export function configLock(node: string, vmid: number, shared = false): LockSpec {
  return { kind: "flock", node, path: `/var/lock/qemu-server/lock-${vmid}.conf`, shared };
}

/**
 * The lock vdisk_alloc holds while it allocates a volume (pve-storage
 * Plugin.pm cluster_lock_storage): a flock on the node for local storage,
 * the cluster lock `storage-<id>` for shared storage.
 */
export function storageLock(storage: string, shared: boolean, node: string): LockSpec {
  return shared
    ? { kind: "cfs", id: `storage-${storage}` }
    : { kind: "flock", node, path: `/var/lock/pve-manager/pve-storage-${storage}` };
}
