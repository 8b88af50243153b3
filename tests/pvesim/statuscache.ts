// pveproxy's workers each keep the status dump pmxcfs gave them for a while
// (pve-cluster's rrd_dump reuses it for 2 s), while the guest list and
// config properties are read fresh per call. Calls spread over the workers,
// so a guest that changed a moment ago can show its new status on one
// /cluster/resources call and its old one on the next (seen on the real
// cluster: a VM made a moment ago showed `"template":1` on one call and not
// on the next, for ~2 s). Opt-in: faults.statusCacheWorkers.

import type { SimCore } from "./router.ts";
import type { StatusView } from "./state.ts";

interface Workers {
  next: number;
  /** The dump each worker took last. */
  dumps: StatusView[];
}

const WORKERS = new WeakMap<SimCore, Workers>();

/** The status the next /cluster/resources call sees (the newest, without the fault). */
export function statusView(core: SimCore): StatusView {
  const now = core.state.statusNow();
  const count = core.faults.statusCacheWorkers;
  if (!(count > 0)) return now;
  let w = WORKERS.get(core);
  if (!w) {
    w = { next: 0, dumps: [] };
    WORKERS.set(core, w);
  }
  const i = w.next++ % count;
  const dump = w.dumps[i];
  if (dump === undefined || now.at - dump.at >= core.state.timing.statusCacheMs) w.dumps[i] = now;
  return w.dumps[i];
}
