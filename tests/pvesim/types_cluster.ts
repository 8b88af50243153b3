// Public types of the version switch and the multi-node behaviours
// (versions.ts, multinode.ts, statuscache.ts); types.ts extends them, and
// mod.ts re-exports both.

/** Timings of a cluster whose nodes come and go. */
export interface ClusterTiming {
  /** A call to a node whose link is cut, after the first one: `595 No route to host` this late (real: 600–3100). */
  noRouteMs: number;
  /** How long /cluster/resources keeps a cut-off node's last status (pmxcfs: 300000). */
  statusStaleMs: number;
  /** How long a node that rejoined reads `unknown` until its pvestatd reports (real: up to 10000). */
  rejoinUnknownMs: number;
  /** How long each pveproxy worker reuses its status dump (faults.statusCacheWorkers; real: 2000). */
  statusCacheMs: number;
}

export interface VersionOptions {
  /**
   * The qemu-server version behind pveVersion (versions.ts): from 9.1.15 a
   * clone checks Mapping.Use on a custom CPU model, from 9.1.19 a disk a
   * destroy cannot free is logged with `WARN: ` and counted. Default: 9.2.6
   * for pve-manager 9.2.11 (as seen), else `<major>.<minor>.0` of pveVersion.
   */
  qemuServerVersion?: string;
}

export interface ClusterFaults {
  /**
   * pveproxy workers with a status dump of their own (statuscache.ts): each
   * /cluster/resources call goes to the next worker, which reuses its dump
   * for timing.statusCacheMs, so a change can show on one call and not on the
   * next. 0 (default): every call sees the newest status.
   */
  statusCacheWorkers: number;
}

export type CutMode = "link" | "daemons";

export interface ClusterHandle {
  /**
   * Cut a node off (multinode.ts): `link` (its network is gone: the first
   * call to it answers `595 Connection timed out` after proxyTimeoutMs, later
   * ones `595 No route to host` after noRouteMs) or `daemons` (its PVE
   * services are stopped: `595 Connection refused` at once). It leaves the
   * membership (offline); /cluster/resources keeps its last status for
   * statusStaleMs. The node the API is served from (the first) cannot be cut.
   */
  cutNode(node: string, mode?: CutMode): void;
  /** The node is back: answered again, listed `unknown` for rejoinUnknownMs, then online. */
  rejoinNode(node: string): void;
}
