// pveproxy's workers each keep the status dump pmxcfs gave them for a while
// (pve-cluster's rrd_dump reuses it for 2 s), while the guest list and
// config properties are read fresh per call. Calls spread over the workers,
// so a guest that changed a moment ago can show its new status on one
// /cluster/resources call and its old one on the next (seen on the real
// cluster: a VM made a moment ago showed `"template":1` on one call and not
// on the next, for ~2 s). Opt-in: faults.statusCacheWorkers.

import type { SimCore } from "./router.ts";

interface Workers {
  next: number;
  /** When each worker last took its dump. */
  dumpedAt: number[];
}

const WORKERS = new WeakMap<SimCore, Workers>();

/** The time whose status the next /cluster/resources call sees (now, without the fault). */
export function statusViewTime(core: SimCore): number {
  const now = Date.now();
  const count = core.faults.statusCacheWorkers;
  if (!(count > 0)) return now;
  let w = WORKERS.get(core);
  if (!w) {
    w = { next: 0, dumpedAt: [] };
    WORKERS.set(core, w);
  }
  const i = w.next++ % count;
  const at = w.dumpedAt[i];
  if (at === undefined || now - at >= core.state.timing.statusCacheMs) w.dumpedAt[i] = now;
  return w.dumpedAt[i];
}
