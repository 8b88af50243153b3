// The Proxmox backend's poll intervals and limits: the defaults production
// runs with, which tests shrink.

import type { Backoff } from "../async/poll.ts";

/** Poll intervals and limits; tests shrink them, production uses the defaults. */
export interface Timing {
  task: Backoff;
  exec: Backoff;
  agentPollMs: number;
  /** After a start, the first ping waits this long (at most agentPollMs). */
  agentFirstPollMs: number;
  agentTimeoutMs: number;
  /** Pause between readiness checks (each is an agent exec; pvedaemon has 3 workers per node). */
  readyPollMs: number;
  /** Poll interval while waiting for a lock or a state change. */
  settleMs: number;
  requestTimeoutMs: number;
  readAttempts: number;
  retryBaseMs: number;
  /** Attempts for an action after ambiguous (596-type) failures. */
  actionAttempts: number;
  /** How long to look for a clone whose POST failed ambiguously (596). */
  cloneSettleMs: number;
  /** Clone attempts after lost VMID races. */
  raceAttempts: number;
  probeTimeoutMs: number;
  /** Bound of the startup template check; what it cannot check by then is left to Create. */
  startupCheckMs: number;
  /** Frees tried per volume a destroy left behind, and the waits between them. */
  volumeAttempts: number;
  volumeRetry: Backoff;
  /** How long a `lock: destroyed` stub may stay before it counts as a destroy that died. */
  destroyedGraceMs: number;
  /** Waits between checks of --nodes when the API did not answer at startup. */
  nodeRecheck: Backoff;
  /** After a Create ended, how long its node's reservation waits for pvestatd to show its VM. */
  roomSettleMs: number;
  /** A refused admission refreshes the node listing when it is older than this. */
  roomRefreshMs: number;
  /** Waits between looks at a node a Delete or Drain waits for (cluster/nodes.ts outlastOutages). */
  outageRecheck: Backoff;
}

export const DEFAULT_TIMING: Timing = {
  // A poll of a task's status is a short protected call; at most every second.
  task: { initialMs: 200, maxMs: 1000 },
  exec: { initialMs: 100, maxMs: 1000 },
  // ≥ 3 s: a ping to a booting guest holds one of pvedaemon's 3 workers for 3 s.
  agentPollMs: 3000,
  // A guest up within half a second of its start is found at once; others every agentPollMs.
  agentFirstPollMs: 500,
  agentTimeoutMs: 300_000,
  readyPollMs: 3000,
  settleMs: 1000,
  requestTimeoutMs: 60_000,
  readAttempts: 4,
  retryBaseMs: 500,
  actionAttempts: 3,
  cloneSettleMs: 10_000,
  raceAttempts: 5,
  probeTimeoutMs: 15_000,
  startupCheckMs: 30_000,
  volumeAttempts: 4,
  // An RBD image stays watched ~30 s after a hard stop: 2.5 + 5 + 10 + 20 s of waits outlast it.
  volumeRetry: { initialMs: 2_500, maxMs: 20_000, factor: 2 },
  destroyedGraceMs: 60_000,
  nodeRecheck: { initialMs: 5_000, maxMs: 60_000 },
  // pvestatd reports every 10 s; a pveproxy worker's status dump may be 2 s older.
  roomSettleMs: 15_000,
  roomRefreshMs: 5_000,
  outageRecheck: { initialMs: 2_000, maxMs: 15_000 },
};
